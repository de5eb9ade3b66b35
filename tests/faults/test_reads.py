"""Objects read no larger than they must be, and a checksum mismatch read twice (issue
19, points 6 and 7)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from s3kv import Downloader
from tests.faults.conftest import NS, cli, seed_blocks, settings
from tests.faults.proxy import HUGE

pytestmark = pytest.mark.integration

OVERSIZED = 16 * 1024 * 1024


@pytest.fixture
def cache(bucket: str, moto_server: str, s3: Any) -> tuple[str, list[bytes], str]:
    """5 blocks of 4 KiB at s3://bucket/kv, the third replaced by a 16 MiB object (its
    metadata kept: a valid key, a recorded checksum, the wrong size)."""
    url = f"s3://{bucket}/kv"
    ks = seed_blocks(url, moto_server, 5)
    with Downloader(url, NS, settings=settings(moto_server, "botocore")) as down:
        key = down.keys.key_for(ks[2])
    meta = s3.head_object(Bucket=bucket, Key=key)["Metadata"]
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(OVERSIZED), Metadata=meta)
    return url, ks, key


@pytest.mark.parametrize("kept", [10_000, 3])
def test_a_pull_lists_its_source_once_when_it_can_keep_the_listing(
    proxy: Any,
    bucket: str,
    moto_server: str,
    data_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    kept: int,
) -> None:
    """The count, the rank folder's usual size and the copy come from one listing (it
    was three: count, copy, and the folder's sizes); a listing longer than the entries
    kept is walked again to copy, and every block still arrives."""
    import s3kv.ops.sync as sync

    monkeypatch.setattr(sync, "REPLAY_ENTRIES", kept)
    url = f"s3://{bucket}/kv"
    seed_blocks(url, moto_server, 6)
    p = proxy(max_keys=4)  # two pages a walk
    code, out, err = cli(capsys, "pull", url, str(tmp_path / "dst"), "--json", endpoint=p.url,
                         data_path=data_path)
    assert code == 0 and json.loads(out)["copied"] == 6, (out, err)
    assert len(list((tmp_path / "dst").rglob("*.bin"))) == 6
    walks = 1 if kept > 7 else 2  # 6 blocks and the manifest
    assert len([r for r in p.requests if r.is_listing]) == 2 * walks


def gets_of(p: Any, key: str) -> list[Any]:
    return [r for r in p.seen("GET") if r.path.endswith(key)]


def test_pull_and_verify_never_read_an_oversized_block(
    proxy: Any,
    cache: tuple[str, list[bytes], str],
    data_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _, key = cache
    p = proxy()
    code, out, _ = cli(
        capsys, "pull", url, str(tmp_path / "dst"), "--json", endpoint=p.url, data_path=data_path
    )
    report = json.loads(out)
    # today: the 16 MiB object is read whole and written, exit 0
    assert code == 1 and report["copied"] == 4 and report["failed"] == 1
    (why,) = report["failures"].values()
    assert f"{OVERSIZED} bytes, larger than the 4096" in why
    assert not gets_of(p, key)  # not one byte of it was asked for
    assert not [f for f in (tmp_path / "dst").rglob("*.bin") if f.stat().st_size != 4096]
    code, out, _err = cli(capsys, "verify", url, "--deep", "--json", endpoint=p.url,
                         data_path=data_path)
    found = json.loads(out)
    assert code == 1 and found["counts"] == {"size-mismatch": 1}
    assert found["blocks_read"] == 4 and not gets_of(p, key)


@pytest.mark.parametrize("into", [True, False])
def test_loads_refuse_an_oversized_object_unread(
    proxy: Any, bucket: str, moto_server: str, data_path: str, into: bool
) -> None:
    url = f"s3://{bucket}/kv"
    ks = seed_blocks(url, moto_server, 3)
    # Every GET answers with the object's headers and a 512 MiB body.
    p = proxy(lambda r: "huge" if r.is_block else None)
    s = settings(p.url, data_path)
    with Downloader(url, NS, settings=s, block_size_bytes=4096) as down:
        if into:
            out = np.full((3, 4096), 7, dtype=np.uint8)
            report = down.get_blocks(ks, into=list(out))
            assert not out.any()
        else:
            report = down.get_blocks(ks)
    assert len(report.failed) == 3
    assert all(f"{HUGE} bytes" in why for why in report.failed.values()), report.failed
    sent = [r.sent for r in p.seen("GET", blocks=True)]
    assert sent and max(sent) < 32 * 1024 * 1024  # hung up early, never read whole


def test_a_byte_flipped_on_the_wire_once_is_read_again(
    proxy: Any,
    bucket: str,
    moto_server: str,
    data_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"s3://{bucket}/kv"
    seed_blocks(url, moto_server, 4)
    p = proxy(lambda r: "flip" if r.is_block and r.method == "GET" and r.attempt == 1 else None)
    code, out, err = cli(capsys, "pull", url, str(tmp_path / "dst"), endpoint=p.url,
                         data_path=data_path)
    assert code == 0, (out, err)  # today: 4 failed with a checksum mismatch
    assert len(list((tmp_path / "dst").rglob("*.bin"))) == 4
    p.counts.clear()  # a first read of each block again: flipped again
    code, out, err = cli(capsys, "verify", url, "--deep", "--json", endpoint=p.url,
                         data_path=data_path)
    assert code == 0 and json.loads(out)["counts"] == {}  # not blamed on the object
    assert len(p.injected("flip")) == 8


def test_a_block_damaged_at_rest_is_reported_as_damage(
    proxy: Any,
    bucket: str,
    moto_server: str,
    data_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"s3://{bucket}/kv"
    seed_blocks(url, moto_server, 2)
    p = proxy(lambda r: "flip" if r.is_block and r.method == "GET" else None)
    code, out, _ = cli(capsys, "pull", url, str(tmp_path / "dst"), "--json", endpoint=p.url,
                       data_path=data_path)
    report = json.loads(out)
    assert code == 1 and report["failed"] == 2
    assert all("read twice with the same result" in w for w in report["failures"].values())
    code, out, _err = cli(capsys, "verify", url, "--deep", "--json", endpoint=p.url,
                         data_path=data_path)
    found = json.loads(out)
    assert code == 1 and found["counts"] == {"checksum-mismatch": 2}
    assert all("damaged" in f["message"] for f in found["findings"])
    assert len(p.injected("flip")) == 8  # each block read twice, twice


def test_a_full_local_disk_is_the_machines_problem_told_once_never_retried(
    proxy: Any, bucket: str, moto_server: str
) -> None:
    """awscrt writing a GET's body into a file on a full disk (``/dev/full``: every write
    is ENOSPC) fails that block once, with the cause and the fix, and is not counted
    against the store: it was retried as the store's failure until its retry quota was
    spent, and said only 'AWS_ERROR_NO_SPACE: Out of space on disk'."""
    from s3kv.errors import StoreError, TransientStoreError
    from s3kv.retry import with_retries
    from s3kv.stores.crt import CrtS3Store

    url = f"s3://{bucket}/kv"
    seed_blocks(url, moto_server, 1)
    p = proxy()
    store = CrtS3Store(bucket, settings(p.url, "crt"))
    try:
        key = next(i.key for i in store.list("kv/") if i.key.endswith(".bin"))
        with pytest.raises(StoreError, match="no space left on device; free space") as caught:
            with_retries(lambda: store.get_to_path(key, "/dev/full", max_bytes=1 << 30),
                         store.settings)
        assert not isinstance(caught.value, TransientStoreError)
        assert len(gets_of(p, key)) == 1
        assert store.get(key)[1].size > 0  # the store is not paused for it
    finally:
        store.close()


def test_a_pull_whose_blocks_all_fail_alike_says_the_cause_once(
    bucket: str, moto_server: str, tmp_path: Path
) -> None:
    """A real ``s3kv pull`` whose every block awscrt cannot write (the process may write
    no file past 16 KiB, as ``ulimit -f`` sets it; 64 KiB blocks): one line says how many
    blocks failed and why (the limit, named with its fix, not retried as the store's
    failure), not a line per block each with its own retry timing; exit 1, and no block
    nor temp file is left."""
    url = f"s3://{bucket}/kv"
    seed_blocks(url, moto_server, 6, size=64 << 10)
    dst = tmp_path / "dst"

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 10, 16 << 10))

    done = subprocess.run(
        [sys.executable, "-m", "s3kv.cli", "pull", url, str(dst), "--endpoint-url", moto_server],
        capture_output=True, text=True, timeout=120, preexec_fn=small_files,
        env={**{k: v for k, v in os.environ.items() if k != "S3KV_TRACE_FILE"},  # a file too
             "S3KV_MAX_ATTEMPTS": "2"})
    failed = [line for line in done.stdout.splitlines() if line.startswith("failed: ")]
    assert done.returncode == 1, done.stderr
    assert len(failed) == 1 and failed[0].startswith("failed: 6 blocks, one cause: GET <block>"), (
        done.stdout, done.stderr)
    # the machine's limit, named with its fix: not retried as the store's failure
    assert "may write no file past 16,384 bytes (ulimit -f)" in failed[0], failed[0]
    assert "gave up after" not in failed[0], failed[0]
    assert "6 failed" in done.stdout.splitlines()[-1]
    assert not [p for p in dst.rglob("*") if p.is_file() and p.name != "config.json"]
