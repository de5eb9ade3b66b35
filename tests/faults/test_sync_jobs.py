"""push and pull (s3kv.ops.sync_files): every block a job whose completion counts it.

On awscrt no thread waits for a block: the requests of a push or a pull are submitted and
in flight together, and no block's blocking request (``put_from_path``, ``get_to_path``)
holds a thread of the sync's pool (it held one per request in flight: 32 threads handing
the GIL back and forth). The pool only prepares a pushed block (its file opened and
mapped, its checksum taken), off awscrt's event loop. On botocore, which cannot submit,
the blocking requests run on that pool as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from s3kv.ops.sync import sync
from s3kv.stores.base import Store
from s3kv.stores.crt import CrtS3Store
from tests.faults.conftest import settings, write_tree
from tests.faults.proxy import FaultProxy

pytestmark = pytest.mark.integration
BLOCKS = 48


def slow_blocks(request: Any) -> str | None:
    return "slow" if request.is_block else None


def test_a_push_and_a_pull_keep_their_requests_in_flight_with_no_thread_per_block(
    tmp_path: Path, moto_server: str, bucket: str, data_path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_tree(tmp_path / "src", BLOCKS)
    url = f"s3://{bucket}/kv"
    blocking: list[str] = []  # a thread held for the whole of one block's request
    for cls in (Store, CrtS3Store):
        for name in ("put_from_path", "get_to_path"):
            real = cls.__dict__[name]

            def held(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
                blocking.append(_name)
                return _real(*args, **kwargs)

            monkeypatch.setattr(cls, name, held)
    for source, destination in ((tmp_path / "src", url), (url, tmp_path / "dst")):
        with FaultProxy(moto_server, slow_blocks, delay=0.05) as proxy:
            s = settings(proxy.url, data_path, concurrency=16)
            report = sync(source, destination, settings=s)
            connections = len(proxy.connections)
        assert report.copied == BLOCKS and report.failed == 0, report.failures
        assert connections >= 8  # the blocks' requests overlapped
    if data_path == "crt":
        assert blocking == []  # every block's request submitted
    else:
        # botocore blocks a thread per request
        assert sorted(set(blocking)) == ["get_to_path", "put_from_path"]
        assert len(blocking) == 2 * BLOCKS
    copied = sorted(p.relative_to(tmp_path / "dst") for p in (tmp_path / "dst").rglob("*"))
    assert copied == sorted(p.relative_to(tmp_path / "src") for p in (tmp_path / "src").rglob("*"))
    assert not list((tmp_path / "dst").rglob("*.tmp"))


@pytest.mark.timeout(60)
def test_ctrl_c_as_a_block_is_being_started_ends_the_sync_at_once(
    tmp_path: Path, moto_server: str, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C lands while a block's job is being made: that block was never started, so
    nothing waits for it (the sync waited for its count forever) and its slot is back."""
    import s3kv.ops.sync as sync_module

    write_tree(tmp_path / "src", 6)
    made: list[Any] = []
    real = sync_module.TransferJob

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        if len(made) == 2:
            raise KeyboardInterrupt
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(sync_module, "TransferJob", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sync(tmp_path / "src", f"s3://{bucket}/kv", settings=settings(moto_server, "crt"))
    assert len(made) == 2 and all(job.done() for job in made)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("direction", ["pull", "push"])
def test_ctrl_c_inside_a_blocks_start_stops_the_sync_and_leaves_no_temp_file(
    tmp_path: Path, moto_server: str, bucket: str, monkeypatch: pytest.MonkeyPatch,
    direction: str,
) -> None:
    """Ctrl-C (or SIGTERM, which s3kv turns into it) landing while a block is being
    started is the command's interrupt, not that block's failure: the sync stops and
    says so (it was caught as the block's 'unexpected KeyboardInterrupt' and the copy
    went on), the other blocks end, no temp file is left."""
    import s3kv.ops.sync_files as sync_files
    from s3kv.stores import LocalStore

    write_tree(tmp_path / "src", 12)
    url = f"s3://{bucket}/kv"
    s = settings(moto_server, "crt")
    # what start() does on the thread that asks: a pull stages its temp file; a push
    # hands its block to the pool (which opens, maps and checksums it, then sends)
    owner: Any
    if direction == "pull":
        assert sync(tmp_path / "src", url, settings=s).copied == 12
        owner, name, source, destination = LocalStore, "stage", url, tmp_path / "dst"
    else:
        owner, name, source, destination = sync_files, "submit_on_pool", tmp_path / "src", url
    real = getattr(owner, name)
    calls: list[int] = []

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, interrupted)
    with pytest.raises(KeyboardInterrupt):
        sync(source, destination, settings=s)
    assert len(calls) == 5  # nothing started after the interrupt
    assert not list(tmp_path.rglob("*.tmp"))
