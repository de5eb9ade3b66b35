"""``Store.renew``: Last-Modified moves to now; bytes, checksum metadata and tags stay.

Run on every backend (a directory's Last-Modified is its mtime). S3 listings and HEADs
give whole seconds on moto (and AWS), so each test waits a little over one second once.
"""

from __future__ import annotations

import time

import pytest

from s3kv import Namespace, Uploader
from s3kv.stores import Store, open_store
from s3kv.transfer import BLOCK_TAGS
from tests.conftest import Backend

pytestmark = pytest.mark.functional

NS = Namespace(model_name="Qwen/Qwen3-0.6B", tokens_per_hash=16, dtype="bfloat16")
KEY = bytes(range(32)) + (0).to_bytes(4, "big")


def _tags(backend: Backend, key: str) -> dict[str, str]:
    tagging = backend.client.get_object_tagging(Bucket=backend.bucket, Key=key)
    return {t["Key"]: t["Value"] for t in tagging.get("TagSet", [])}


def _write_block(backend: Backend, payload: bytes) -> tuple[Store, str]:
    with Uploader(backend.location, NS, settings=backend.settings) as up:
        assert up.put_blocks({KEY: payload}).ok
        object_key = up.keys.key_for(KEY)
    return open_store(backend.location, backend.settings), object_key


def test_renew_moves_last_modified_and_keeps_bytes_metadata_and_tags(
    every_backend: Backend,
) -> None:
    backend = every_backend  # RGW 16 drops tags on a copy onto itself: renew must restore them
    payload = b"kv" * 1000
    store, key = _write_block(backend, payload)
    try:
        before = store.head(key)
        assert before is not None and before.last_modified is not None
        time.sleep(1.1)
        when = store.renew(key, etag=before.etag, checksum=before.checksum, tags=BLOCK_TAGS)
        assert when is not None and when > before.last_modified
        after = store.head(key)
        assert after is not None and after.last_modified is not None
        assert after.last_modified > before.last_modified
        assert (after.size, after.checksum, after.etag) == (
            before.size,
            before.checksum,
            before.etag,
        )
        assert store.get(key)[0] == payload
        listed = {i.key: i for i in store.list(key)}
        assert listed[key].last_modified is not None
        assert listed[key].last_modified >= after.last_modified.replace(microsecond=0)
        if backend.is_s3:
            assert backend.raw_metadata(key) == {"s3kv-checksum": before.checksum.header()}
            assert _tags(backend, key) == BLOCK_TAGS  # the lifecycle rule still matches
    finally:
        store.close()


def test_renew_of_a_missing_object_changes_nothing(backend: Backend) -> None:
    store, key = _write_block(backend, b"x" * 64)
    try:
        missing = key.replace(".bin", "0.bin")
        assert store.renew(missing, etag='"0"', checksum=None, tags=BLOCK_TAGS) is None
        assert store.head(missing) is None
    finally:
        store.close()


def test_renew_is_refused_when_the_object_is_not_the_one_seen(
    every_s3_backend: Backend,
) -> None:
    s3_backend = every_s3_backend  # the copy condition is the store's to honour (RGW's header)
    """The copy's source condition (ETag): stores that ignore it are named here."""
    if s3_backend.name.startswith("moto"):
        pytest.skip("moto 5 ignores x-amz-copy-source-if-match (checked on RGW)")
    store, key = _write_block(s3_backend, b"a" * 64)
    try:
        seen = store.head(key)
        assert seen is not None
        s3_backend.raw_put(key, b"b" * 64, {"s3kv-checksum": "crc32c:AAAAAA=="})
        assert store.renew(key, etag=seen.etag, checksum=seen.checksum, tags=BLOCK_TAGS) is None
        # the metadata seen never lands on the other bytes
        assert s3_backend.raw_metadata(key) == {"s3kv-checksum": "crc32c:AAAAAA=="}
        # and without an ETag nothing is sent at all
        assert store.renew(key, etag=None, checksum=seen.checksum, tags=BLOCK_TAGS) is None
    finally:
        store.close()
