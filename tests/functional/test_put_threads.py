"""A block's write is prepared off awscrt's event loop: the Uploader's and ``s3kv push``'s.

On the awscrt data path a block's completion (on awscrt's event-loop thread) starts the
next block of the job. What a write takes before its request goes out, its checksum
and, on a store that echoes no checksum (moto, Ceph RGW 16), the MD5 its answer is
checked by, then ran on that thread: about 55 ms of one core for a 32 MiB block, while
every other connection of that loop waited. The Uploader prepares it on the transfer's
pool instead. ``s3kv push`` makes every block a job of its own, started by the sync's
thread as a slot frees, so its files are opened, mapped and checksummed there (moving
that to the pool was measured slower: bench/evidence/push-prep-on-pool.json).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from s3kv import Namespace, S3Settings, Uploader, integrity, make_offload_key
from s3kv.ops.sync import sync
from s3kv.stores.echoes import Echoes
from tests.conftest import _bucket_name, _s3_client

pytestmark = pytest.mark.functional

NS = Namespace(model_name="m/threads", tokens_per_hash=16, dtype="bfloat16")
ROW = 64 << 10


def thread_name() -> str:
    """The calling thread's name; a thread Python did not start (awscrt's event loop) is
    a ``Dummy-N`` to it. (Not the kernel's name: a pool thread started from awscrt's
    thread inherits that, AwsEventLoop1.)"""
    return threading.current_thread().name


def watch(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Where (which thread) each block's checksum and MD5 are taken, from now on."""
    where: list[tuple[str, str]] = []
    real_md5 = Echoes.md5_of

    def md5_of(self: Echoes, body: Any) -> str | None:
        where.append(("md5" if len(memoryview(body)) == ROW else "other", thread_name()))
        return real_md5(self, body)

    real_compute = integrity.compute

    def compute(algorithm: Any, data: Any) -> Any:
        where.append(("checksum" if len(memoryview(data)) == ROW else "other", thread_name()))
        return real_compute(algorithm, data)

    monkeypatch.setattr(Echoes, "md5_of", md5_of)
    monkeypatch.setattr(integrity, "compute", compute)
    return where


def test_checksums_and_md5_of_a_write_never_run_on_the_clients_event_loop(
    moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = _bucket_name()
    _s3_client(moto_server).create_bucket(Bucket=bucket)
    settings = S3Settings.resolve(endpoint_url=moto_server, data_path="crt")
    where = watch(monkeypatch)
    keys = [make_offload_key(os.urandom(32), 0) for _ in range(24)]
    rows = np.random.default_rng(7).integers(0, 256, (24, ROW), dtype=np.uint8)
    # a window of 2: 22 of the 24 blocks are started by a completion
    with Uploader(f"s3://{bucket}/kv", NS, settings=settings, concurrency=2) as up:
        report = up.put_blocks(dict(zip(keys, rows)))
    assert report.ok and len(report.done) == 24, report
    md5s = [name for what, name in where if what == "md5"]
    assert len(md5s) == 24, "moto's server echoes no checksum: every block's write is checked"
    assert len([1 for what, _ in where if what == "checksum"]) == 24
    # (a small write's CRC32C, "other", is taken as its answer is read: on the loop)
    on_loop = [what for what, name in where if name.startswith("Dummy-") and what != "other"]
    assert on_loop == [], f"{len(on_loop)} of 48 ran on awscrt's event loop"


def test_a_pushed_files_checksum_and_md5_never_run_on_the_clients_event_loop(
    moto_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [make_offload_key(os.urandom(32), 0) for _ in range(24)]
    rows = np.random.default_rng(8).integers(0, 256, (24, ROW), dtype=np.uint8)
    with Uploader(tmp_path / "cache", NS) as up:
        assert up.put_blocks(dict(zip(keys, rows))).ok
    bucket = _bucket_name()
    _s3_client(moto_server).create_bucket(Bucket=bucket)
    where = watch(monkeypatch)
    # two in flight: 22 of the 24 files are started as another one's completion frees a slot
    settings = S3Settings.resolve(endpoint_url=moto_server, data_path="crt", concurrency=2)
    report = sync(tmp_path / "cache", f"s3://{bucket}/kv", settings=settings)
    assert report.copied == 24 and report.failed == 0, report.failures
    assert len([1 for what, _ in where if what == "md5"]) == 24
    assert len([1 for what, _ in where if what == "checksum"]) == 24
    on_loop = [what for what, name in where if name.startswith("Dummy-") and what != "other"]
    assert on_loop == [], f"{len(on_loop)} of 48 ran on awscrt's event loop"
