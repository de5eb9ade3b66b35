"""``Store.renew``: Last-Modified moves to now; bytes and metadata stay; the copy is
conditional on the Last-Modified a HEAD read (what stops a second node's copy).

Run on every backend (a directory's Last-Modified is its mtime). S3 listings and HEADs
give whole seconds on moto (and AWS), so each test waits a little over one second once.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from s3kv import Namespace, Uploader
from s3kv.naming.chains import PARENT_METADATA_KEY
from s3kv.stores import Store, open_store
from s3kv.transfers.transfer import BLOCK_TAGS
from tests.conftest import Backend

pytestmark = pytest.mark.functional

NS = Namespace(model_name="Qwen/Qwen3-0.6B", tokens_per_hash=16, dtype="bfloat16")
KEY = bytes(range(32)) + (0).to_bytes(4, "big")
PARENT = bytes(range(1, 33)) + (0).to_bytes(4, "big")


def _tags(backend: Backend, key: str) -> dict[str, str]:
    tagging = backend.client.get_object_tagging(Bucket=backend.bucket, Key=key)
    return {t["Key"]: t["Value"] for t in tagging.get("TagSet", [])}


def _write_block(backend: Backend, payload: bytes) -> tuple[Store, str]:
    with Uploader(backend.location, NS, settings=backend.settings) as up:
        assert up.put_blocks({KEY: payload}, parents={KEY: PARENT}).ok
        object_key = up.keys.key_for(KEY)
    return open_store(backend.location, backend.settings), object_key


def test_renew_moves_last_modified_and_keeps_bytes_and_metadata(
    every_backend: Backend,
) -> None:
    backend = every_backend
    payload = b"kv" * 1000
    store, key = _write_block(backend, payload)
    try:
        before = store.describe(key)
        assert before is not None and before.info.last_modified is not None
        if backend.is_s3:  # the block's parent, as written: what gc's order reads
            assert before.metadata[PARENT_METADATA_KEY] == PARENT[:-4].hex()
        # The store's clock (its Date header; moto in-process sends none, a directory's
        # is this machine's), within the test's run of now.
        if backend.name != "moto":
            assert before.server_time is not None
            assert abs((before.server_time - datetime.now(timezone.utc)).total_seconds()) < 30
        time.sleep(1.1)
        when = store.renew(key, unmodified_since=before.info.last_modified,
                           metadata=before.metadata)
        assert when is not None and when > before.info.last_modified
        after = store.describe(key)
        assert after is not None and after.info.last_modified is not None
        assert after.info.last_modified > before.info.last_modified
        assert (after.info.size, after.info.checksum, after.info.etag) == (
            before.info.size, before.info.checksum, before.info.etag)
        assert after.metadata == before.metadata  # checksum, write id and parent: all kept
        assert store.get(key)[0] == payload
        listed = {i.key: i for i in store.list(key)}
        assert listed[key].last_modified is not None
        assert listed[key].last_modified >= after.info.last_modified.replace(microsecond=0)
    finally:
        store.close()


def test_copies_keep_tags_on_s3_and_drop_them_on_ceph_rgw(every_s3_backend: Backend) -> None:
    """Why the renewer learns, and re-tags only where it must (RGW 16)."""
    backend = every_s3_backend
    store, key = _write_block(backend, b"t" * 64)
    try:
        seen = store.describe(key)
        assert seen is not None and seen.info.last_modified is not None
        assert store.get_tags(key) == BLOCK_TAGS
        time.sleep(1.1)
        assert store.renew(key, unmodified_since=seen.info.last_modified,
                           metadata=seen.metadata) is not None
        kept = _tags(backend, key)
        assert kept == ({} if backend.name.startswith("rgw") else BLOCK_TAGS)
        store.put_tags(key, BLOCK_TAGS)
        assert _tags(backend, key) == BLOCK_TAGS
    finally:
        store.close()


def test_renew_of_a_missing_object_changes_nothing(backend: Backend) -> None:
    store, key = _write_block(backend, b"x" * 64)
    try:
        missing = key.replace(".bin", "0.bin")
        assert store.renew(missing, unmodified_since=datetime.now(timezone.utc),
                           metadata={}) is None
        assert store.head(missing) is None
    finally:
        store.close()


def test_renew_is_refused_when_the_object_changed_since_the_look(
    every_s3_backend: Backend,
) -> None:
    """The copy's condition (Last-Modified to the second) is the store's to honour:
    AWS's x-amz-copy-source-if-unmodified-since, RGW's x-amz-copy-if-unmodified-since."""
    backend = every_s3_backend
    if backend.name.startswith("moto"):
        pytest.skip("moto 5 honours no copy-source date condition (checked on RGW)")
    store, key = _write_block(backend, b"a" * 64)
    try:
        seen = store.describe(key)
        assert seen is not None and seen.info.last_modified is not None
        time.sleep(1.1)
        # another node renews it (or a writer replaces it) after this node's look
        backend.raw_put(key, b"b" * 64, {"s3kv-checksum": "crc32c:AAAAAA=="})
        assert store.renew(key, unmodified_since=seen.info.last_modified,
                           metadata=seen.metadata) is None
        # the metadata seen never lands on the other bytes
        assert backend.raw_metadata(key) == {"s3kv-checksum": "crc32c:AAAAAA=="}
        now = store.describe(key)
        assert now is not None and now.info.last_modified is not None
        # and a condition that still holds is met (the time to the second, as HEAD said)
        time.sleep(1.1)
        assert store.renew(key, unmodified_since=now.info.last_modified + timedelta(0),
                           metadata=now.metadata) is not None
    finally:
        store.close()
