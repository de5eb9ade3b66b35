"""Interop with vLLM's own FileSystemTierManager, both ways, through s3kv's stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult

from s3kv import S3Settings, integrity
from s3kv.stores import LocalStore, PutOptions, S3Store
from s3kv.transfers.transfer import BLOCK_TAGS
from tests.vllm import harness as h

pytestmark = pytest.mark.vllm
PREFIX = "team/kv"


def push(root: Path, bucket: str, endpoint: str) -> int:
    """A directory in vLLM's layout -> s3://bucket/PREFIX, checksummed, create-only."""
    local, s3 = LocalStore(root), S3Store(bucket, S3Settings.resolve(endpoint_url=endpoint))
    n = 0
    for info in local.list(""):
        data, _ = local.get(info.key)
        block = info.key.endswith(".bin")
        options = PutOptions(create_only=True, checksum=integrity.compute("crc32c", data),
                             tags=BLOCK_TAGS if block else {})
        n += s3.put(f"{PREFIX}/{info.key}", data, options)
    s3.close()
    return n


def pull(bucket: str, endpoint: str, root: Path) -> int:
    """s3://bucket/PREFIX -> a directory in vLLM's layout, each object checked."""
    local, s3 = LocalStore(root), S3Store(bucket, S3Settings.resolve(endpoint_url=endpoint))
    n = 0
    for info in s3.list(f"{PREFIX}/"):
        data, meta = s3.get(info.key)
        if meta.checksum is not None:
            integrity.verify(meta.checksum, data, where=info.key)
        n += local.put(info.key.removeprefix(f"{PREFIX}/"), data, PutOptions(create_only=True))
    s3.close()
    return n


def test_fs_tier_cache_pushed_to_s3_is_found_and_loads(
    make_tier: Any, moto_server: str, bucket: str, tmp_path: Path
) -> None:
    spec = h.spec()
    view, array = h.primary_view()
    ks = h.keys(4, start=200)
    h.fill(array, range(4), seed=200)
    fs = h.fs_tier(view, spec, str(tmp_path))
    try:
        assert h.run(fs, h.job(ks, range(4), load=False)).success
    finally:
        fs.shutdown()
    assert push(tmp_path, bucket, moto_server) == 5  # 4 blocks and vLLM's config.json

    tier = make_tier(view, spec)  # accepts the manifest vLLM wrote, not a conflict
    assert h.lookup(tier, ks) == [LookupResult.HIT] * 4
    assert h.run(tier, h.job(ks, range(4, 8), load=True)).success
    assert np.array_equal(array[4:8], array[0:4])


def test_s3_tier_cache_pulled_to_a_directory_is_found_by_the_fs_tier(
    make_tier: Any, moto_server: str, bucket: str, tmp_path: Path
) -> None:
    spec = h.spec()
    view, array = h.primary_view()
    ks = h.keys(4, start=210)
    h.fill(array, range(4), seed=210)
    tier = make_tier(view, spec)
    assert h.run(tier, h.job(ks, range(4), load=False)).success
    assert pull(bucket, moto_server, tmp_path) == 5

    fs = h.fs_tier(view, spec, str(tmp_path))
    try:
        assert h.lookup(fs, ks) == [LookupResult.HIT] * 4
        assert h.run(fs, h.job(ks, range(4, 8), load=True)).success
    finally:
        fs.shutdown()
    assert np.array_equal(array[4:8], array[0:4])


def test_a_fs_tier_cache_with_a_linked_rank_folder_is_pushed_with_the_link_failed(
    moto_server: str, bucket: str, tmp_path: Path
) -> None:
    """vLLM's fs tier reads through a rank folder kept on another disk behind a symlink;
    s3kv never follows it, and says so: each link a failed entry, never "0 copied", exit
    0 (what push said before)."""
    import os

    from s3kv.ops.sync import sync

    spec = h.spec()
    view, array = h.primary_view()
    ks = h.keys(4, start=220)
    h.fill(array, range(4), seed=220)
    root, disk = tmp_path / "kv", tmp_path / "disk2"
    fs = h.fs_tier(view, spec, str(root))
    try:
        assert h.run(fs, h.job(ks, range(4), load=False)).success
    finally:
        fs.shutdown()
    (rank,) = [p for p in root.iterdir() if p.is_dir() and p.name.endswith("_r0")]
    disk.mkdir()
    os.rename(rank, disk / rank.name)
    rank.symlink_to(disk / rank.name, target_is_directory=True)
    fs = h.fs_tier(view, spec, str(root))
    try:  # the peer itself reads through the link
        assert h.lookup(fs, ks) == [LookupResult.HIT] * 4
    finally:
        fs.shutdown()

    report = sync(root, f"s3://{bucket}/{PREFIX}",
                  settings=S3Settings.resolve(endpoint_url=moto_server))
    assert not report.ok and report.failed == 1 and report.copied == 0
    assert "is a symbolic link: not read and not followed" in report.failures[rank.name]
    s3 = S3Store(bucket, S3Settings.resolve(endpoint_url=moto_server))
    try:
        assert [i.key for i in s3.list(f"{PREFIX}/") if i.key.endswith(".bin")] == []
    finally:
        s3.close()
