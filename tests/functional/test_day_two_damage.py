"""Issue 20, point 5: replacing or removing a damaged block never undoes a racing writer.

The guards, on every backend: the block is re-checked right before acting (a writer's
new block is left alone), and on S3 the replacing PUT carries ``If-Match`` with the
ETag judged, so a write landing after the re-check is still kept (moto and Ceph RGW 16
honour it). A conditional DELETE is honoured by moto; Ceph RGW 16 ignores ``If-Match``
on DELETE, the window docs/operations.md names.
"""

from __future__ import annotations

import pytest

from s3kv.integrity import compute
from s3kv.naming.keys import KeyMapper, make_offload_key
from s3kv.naming.namespace import Namespace
from s3kv.ops import damage
from s3kv.stores import ObjectInfo, PutOptions, open_store
from s3kv.transfers.transfer import BLOCK_TAGS
from tests.conftest import Backend

pytestmark = pytest.mark.functional

NS = Namespace(model_name="org/model", tokens_per_hash=16, dtype="bfloat16")
GOOD, BAD, WRITER = b"g" * 1024, b"b" * 1024, b"w" * 1024


def block(backend: Backend) -> str:
    prefix = "team/kv" if backend.is_s3 else ""
    return KeyMapper(NS, prefix=prefix).key_for(make_offload_key(b"\x01" * 32, 0))


def damaged(backend: Backend) -> tuple[str, damage.Judged, damage.Judged]:
    """A block stored with a checksum, then overwritten with other bytes; the good copy."""
    key = block(backend)
    store = open_store(backend.location, backend.settings)
    try:
        # tagged as every block s3kv writes (the lifecycle proof checks what was recorded)
        options = PutOptions(create_only=False, checksum=compute("crc32c", GOOD), tags=BLOCK_TAGS)
        store.put(key, GOOD, options)
    finally:
        store.close()
    backend.tamper(key, BAD)
    good = damage.Judged(key, GOOD, ObjectInfo(key, len(GOOD)), "")
    store = open_store(backend.location, backend.settings)
    try:
        judged = damage.judge(store, key, backend.settings, usual=len(GOOD))
    finally:
        store.close()
    if backend.is_s3:
        assert judged.damaged and "checksum mismatch" in judged.problem
    return key, judged, good


def test_a_block_rewritten_after_judging_is_neither_replaced_nor_removed(
    backend: Backend,
) -> None:
    key, judged, good = damaged(backend)
    backend.raw_put(key, WRITER)  # a writer puts the block again meanwhile
    store = open_store(backend.location, backend.settings)
    try:
        assert damage.replace(store, judged, good, backend.settings) is False
        assert damage.remove(store, judged, backend.settings) is False
    finally:
        store.close()
    assert backend.raw_get(key) == WRITER


def test_the_replacing_put_is_conditional_on_the_etag_judged(
    every_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = every_backend  # If-Match on PUT is the store's to honour: RGW's answer counts
    key, judged, good = damaged(backend)
    real = damage._unchanged

    def race(*args: object) -> bool:
        ok = real(*args)  # type: ignore[arg-type]
        backend.raw_put(key, WRITER)  # lands after the re-check, before the PUT
        return ok

    monkeypatch.setattr(damage, "_unchanged", race)
    store = open_store(backend.location, backend.settings)
    try:
        written = damage.replace(store, judged, good, backend.settings)
    finally:
        store.close()
    if backend.is_s3:  # If-Match: the writer's block stays
        assert written is False and backend.raw_get(key) == WRITER
    else:  # a directory has no ETag: the documented window (the good copy goes in)
        assert written is True and backend.raw_get(key) == GOOD


def test_a_conditional_delete_where_the_store_honours_it(
    every_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = every_backend  # RGW 16 ignores If-Match on DELETE: what it does counts
    if not backend.is_s3:
        pytest.skip("a directory has no ETag: the re-check is the only guard")
    key, judged, _ = damaged(backend)
    real = damage._unchanged

    def race(*args: object) -> bool:
        ok = real(*args)  # type: ignore[arg-type]
        backend.raw_put(key, WRITER)
        return ok

    monkeypatch.setattr(damage, "_unchanged", race)
    store = open_store(backend.location, backend.settings)
    try:
        removed = damage.remove(store, judged, backend.settings)
    finally:
        store.close()
    if backend.name.startswith("rgw"):  # Ceph RGW 16 ignores If-Match on DELETE
        assert removed is True and key not in backend.raw_keys()
    else:
        assert removed is False and backend.raw_get(key) == WRITER
