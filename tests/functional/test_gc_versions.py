"""Versioned buckets (issue 28, point 5): gc counts what stops being stored.

In a versioned bucket a delete only adds a delete marker, and every renewal (a copy of
a block onto itself) leaves the previous version behind: gc reports those noncurrent
versions (and frees 0 bytes), and ``--delete-noncurrent-versions`` removes them. Ceph
RGW 16 ignores If-None-Match on a versioned bucket, so s3kv refuses to write there,
saying why.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from s3kv import KeyMapper, Namespace, UnsupportedByStoreError, Uploader, make_offload_key
from s3kv.cli.gc import summary_line
from s3kv.ops.gc.collect import gc
from s3kv.stores import open_store
from tests.conftest import Backend

pytestmark = pytest.mark.functional

NS = Namespace(model_name="Qwen/Qwen3-0.6B", tokens_per_hash=16, dtype="bfloat16")
BLOCK = 512
LATER = datetime.now(timezone.utc) + timedelta(hours=1)


def _versioned(backend: Backend) -> None:
    backend.client.put_bucket_versioning(
        Bucket=backend.bucket, VersioningConfiguration={"Status": "Enabled"})


def _versions(backend: Backend) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    got = backend.client.list_object_versions(Bucket=backend.bucket, Prefix="team/kv/")
    blocks = [v for v in got.get("Versions", []) if v["Key"].endswith(".bin")]
    markers = [m for m in got.get("DeleteMarkers", []) if m["Key"].endswith(".bin")]
    return blocks, markers


def _write_and_renew(backend: Backend, n: int) -> list[str]:
    keys = [make_offload_key(bytes([7, i]) * 16, 0) for i in range(n)]
    with Uploader(backend.location, NS, settings=backend.settings) as up:
        assert up.put_blocks({k: bytes([i]) * BLOCK for i, k in enumerate(keys)}).ok
    mapper = KeyMapper(NS, prefix="team/kv")
    store = open_store(backend.location, backend.settings)
    time.sleep(1.1)
    try:  # every block renewed once: each leaves a noncurrent version
        for k in keys:
            seen = store.describe(mapper.key_for(k))
            assert seen is not None and seen.info.last_modified is not None
            assert store.renew(mapper.key_for(k), unmodified_since=seen.info.last_modified,
                               metadata=seen.metadata)
    finally:
        store.close()
    return [mapper.key_for(k) for k in keys]


def test_gc_in_a_versioned_bucket_reports_what_stays_stored(s3_backend: Backend) -> None:
    backend = s3_backend
    _versioned(backend)
    _write_and_renew(backend, 4)
    report = gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    assert report.versioning == "Enabled"
    assert report.blocks_deleted == 4
    assert report.bytes_freed == 0  # a delete there only hides the bytes
    # each block: the renewed version (now noncurrent under the marker) and the one
    # the renewal replaced
    assert (report.noncurrent_versions, report.noncurrent_bytes) == (8, 8 * BLOCK)
    line = summary_line(report)
    assert "freed 0 B" in line and "8 noncurrent versions (4.0 KiB) still stored" in line
    assert "--delete-noncurrent-versions" in line
    blocks, markers = _versions(backend)
    assert len(blocks) == 8 and len(markers) == 4


def test_delete_noncurrent_versions_removes_them_and_their_markers(
    s3_backend: Backend,
) -> None:
    backend = s3_backend
    _versioned(backend)
    keys = _write_and_renew(backend, 3)
    dry = gc(backend.location, older_than=0, now=LATER, settings=backend.settings,
             delete_noncurrent_versions=True, dry_run=True)
    assert (dry.noncurrent_versions, dry.noncurrent_versions_deleted) == (3, 3)
    assert len(_versions(backend)[0]) == 6  # a dry run removes nothing
    report = gc(backend.location, older_than=0, now=LATER, settings=backend.settings,
                delete_noncurrent_versions=True)
    assert report.noncurrent_versions_deleted == 6
    assert report.bytes_freed == 6 * BLOCK
    assert (report.noncurrent_versions, report.noncurrent_bytes) == (0, 0)
    assert _versions(backend) == ([], [])  # not a trace left of the blocks
    manifest = KeyMapper(NS, prefix="team/kv").config_key()
    assert backend.client.head_object(Bucket=backend.bucket, Key=manifest)  # untouched
    assert not set(keys) & set(backend.raw_keys())


def test_live_blocks_keep_their_current_version(s3_backend: Backend) -> None:
    """Only noncurrent versions go: what renewal left behind of blocks still in use."""
    backend = s3_backend
    _versioned(backend)
    keys = _write_and_renew(backend, 2)
    report = gc(backend.location, older_than=3600, now=datetime.now(timezone.utc),
                settings=backend.settings, delete_noncurrent_versions=True)
    assert report.blocks_deleted == 0 and report.noncurrent_versions_deleted == 2
    blocks, markers = _versions(backend)
    assert sorted(v["Key"] for v in blocks) == sorted(keys) and not markers
    assert all(v["IsLatest"] for v in blocks)


def test_an_unversioned_bucket_reports_no_versions(backend: Backend) -> None:
    with Uploader(backend.location, NS, settings=backend.settings) as up:
        assert up.put_blocks({make_offload_key(b"\x01" * 32, 0): b"x" * BLOCK}).ok
    report = gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    assert report.versioning is None and report.noncurrent_versions == 0
    assert report.bytes_freed == BLOCK
    assert "versioned bucket" not in summary_line(report)


def test_writing_to_a_versioned_ceph_rgw_bucket_is_refused_naming_versioning(
    every_s3_backend: Backend,
) -> None:
    backend = every_s3_backend
    _versioned(backend)
    up = Uploader(backend.location, NS, settings=backend.settings)
    try:
        if backend.name.startswith("rgw"):
            with pytest.raises(UnsupportedByStoreError, match=r"bucket is versioned.*Ceph RGW"):
                up.put_blocks({make_offload_key(b"\x02" * 32, 0): b"x" * BLOCK})
        else:  # moto honours If-None-Match on versioned buckets (as AWS documents)
            assert up.put_blocks({make_offload_key(b"\x02" * 32, 0): b"x" * BLOCK}).ok
    finally:
        up.close()
