"""push and pull (s3kv.ops.sync_files): every block a job whose completion counts it.

On awscrt no thread waits for a block: the requests of a push or a pull are in flight
together while the sync's thread pool starts no thread for them (it started one per
request in flight: 32 threads handing the GIL back and forth). On botocore, which cannot
submit, the blocking requests run on that pool as before.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from s3kv.ops.sync import sync
from s3kv.progress import Progress
from tests.faults.conftest import settings, write_tree
from tests.faults.proxy import FaultProxy

pytestmark = pytest.mark.integration
BLOCKS = 48


def pool_threads() -> int:
    return sum(t.name.startswith("s3kv-sync") for t in threading.enumerate())


def slow_blocks(request: Any) -> str | None:
    return "slow" if request.is_block else None


def test_a_push_and_a_pull_keep_their_requests_in_flight_with_no_thread_per_block(
    tmp_path: Path, moto_server: str, bucket: str, data_path: str
) -> None:
    write_tree(tmp_path / "src", BLOCKS)
    url = f"s3://{bucket}/kv"
    seen: list[int] = []

    def sample(_: Progress) -> None:
        seen.append(pool_threads())

    for source, destination in ((tmp_path / "src", url), (url, tmp_path / "dst")):
        with FaultProxy(moto_server, slow_blocks, delay=0.05) as proxy:
            s = settings(proxy.url, data_path, concurrency=16)
            report = sync(source, destination, settings=s, on_progress=sample)
            connections = len(proxy.connections)
        assert report.copied == BLOCKS and report.failed == 0, report.failures
        assert connections >= 8  # the blocks' requests overlapped
    assert seen
    if data_path == "crt":
        assert max(seen) <= 1, seen  # a manifest's copy, at most
    else:
        assert max(seen) > 1, seen  # botocore blocks a thread per request
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
    from s3kv.stores import LocalStore
    from s3kv.stores.crt import CrtS3Store

    write_tree(tmp_path / "src", 12)
    url = f"s3://{bucket}/kv"
    s = settings(moto_server, "crt")
    if direction == "pull":
        assert sync(tmp_path / "src", url, settings=s).copied == 12
        cls, name, source, destination = LocalStore, "stage", url, tmp_path / "dst"
    else:
        cls, name, source, destination = CrtS3Store, "submit_put", tmp_path / "src", url
    real = getattr(cls, name)
    calls: list[int] = []

    def interrupted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, interrupted)
    with pytest.raises(KeyboardInterrupt):
        sync(source, destination, settings=s)
    assert len(calls) == 5  # nothing started after the interrupt
    assert not list(tmp_path.rglob("*.tmp"))
