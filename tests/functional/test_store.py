"""The store contract, the same on every backend (moto, moto server, directory, RGW).

The one suite that runs on all five backends (``every_backend``): what a behaviour test
above the store may take for granted on any of them. Tests here use ``backend``, which
this module binds to ``every_backend``.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from s3kv import ObjectNotFoundError, SizeMismatchError
from s3kv.integrity import compute
from s3kv.stores import PutOptions, Store, open_store
from s3kv.transfers.transfer import BLOCK_TAGS
from tests.conftest import Backend

pytestmark = pytest.mark.functional

CREATE = PutOptions(create_only=True)
OVERWRITE = PutOptions(create_only=False)


@pytest.fixture
def backend(every_backend: Backend) -> Backend:
    """The contract holds on every backend, Ceph RGW over HTTP and TLS included."""
    return every_backend


@pytest.fixture
def store(backend: Backend) -> Store:
    s = open_store(backend.location, backend.settings)
    yield s
    s.close()


def key(backend: Backend, name: str) -> str:
    return f"team/kv/{name}" if backend.is_s3 else name


def test_put_get_head_round_trip(backend: Backend, store: Store) -> None:
    k = key(backend, "a/b/obj.bin")
    checksum = compute("crc32c", b"hello world")
    assert store.put(k, b"hello world", PutOptions(checksum=checksum)) is True
    data, info = store.get(k)
    assert data == b"hello world" and info.size == 11
    head = store.head(k)
    assert head is not None and head.size == 11
    if backend.is_s3:
        assert head.checksum == checksum  # metadata travels on every S3 store
    assert backend.raw_get(k) == b"hello world"


def test_create_only_never_overwrites(backend: Backend, store: Store) -> None:
    k = key(backend, "x/one.bin")
    assert store.put(k, b"first", CREATE) is True
    assert store.put(k, b"second", CREATE) is False
    assert store.get(k)[0] == b"first"
    assert store.put(k, b"third", OVERWRITE) is True
    assert store.get(k)[0] == b"third"


def test_get_into_fills_the_buffer_without_copy(backend: Backend, store: Store) -> None:
    k = key(backend, "x/into.bin")
    payload = bytes(range(256)) * 64
    store.put(k, payload, CREATE)
    target = bytearray(len(payload))
    info = store.get_into(k, memoryview(target))
    assert bytes(target) == payload and info.size == len(payload)


def test_get_into_refuses_a_wrong_size_before_writing(backend: Backend, store: Store) -> None:
    k = key(backend, "x/short.bin")
    store.put(k, b"12345", CREATE)
    target = bytearray(b"\xaa" * 8)
    with pytest.raises(SizeMismatchError, match="5 bytes, expected 8"):
        store.get_into(k, memoryview(target))
    assert target == bytearray(b"\xaa" * 8)


def test_a_large_block_is_written_create_only_with_its_checksum(
    backend: Backend, store: Store
) -> None:
    """Blocks from 1 MiB up are sent, on the awscrt data path, by s3kv.stores.direct: the
    kernel sends the body from the caller's buffer (signed; TLS on rgw-https)."""
    k = key(backend, "x/large-put.bin")
    payload = np.random.default_rng(5).integers(0, 256, 6 << 20, dtype=np.uint8)
    checksum = compute("crc32c", memoryview(payload))
    options = PutOptions(create_only=True, checksum=checksum, tags=BLOCK_TAGS)
    assert store.put(k, memoryview(payload), options) is True
    assert store.put(k, memoryview(payload[::-1].copy()), options) is False  # create-only
    data, info = store.get(k)
    assert data == payload.tobytes() and info.size == len(payload)
    if backend.is_s3:
        assert info.checksum == checksum  # the metadata header went with the body


@pytest.mark.parametrize("parts", [1, 3])
def test_a_large_block_lands_whole_in_ranged_parts(
    backend: Backend, store: Store, parts: int
) -> None:
    """Blocks from 1 MiB up go, on the awscrt data path, to s3kv.stores.direct_get: a GET
    per part read by the kernel into the buffer (signed, over TLS on rgw-https)."""
    k = key(backend, "x/large.bin")
    payload = np.random.default_rng(parts).integers(0, 256, 12 << 20, dtype=np.uint8)
    store.put(k, memoryview(payload), CREATE)
    target = np.zeros_like(payload)
    finished = threading.Event()
    got: list[object] = []

    def done(info: object, error: BaseException | None) -> None:
        got.extend([info, error])
        finished.set()

    if store.can_submit(len(payload)):
        store.submit_get_into(k, memoryview(target), done, parts=parts)
        assert finished.wait(30)
        info, error = got
        assert error is None
    else:  # a directory reads whole blocks
        info = store.get_into(k, memoryview(target))
    assert np.array_equal(target, payload) and info.size == len(payload)  # type: ignore[attr-defined]
    wrong = np.zeros(len(payload) - 1, dtype=np.uint8)
    with pytest.raises(SizeMismatchError):
        store.get_into(k, memoryview(wrong))
    assert not wrong.any()


def test_missing_objects(backend: Backend, store: Store) -> None:
    k = key(backend, "nope/none.bin")
    assert store.head(k) is None
    with pytest.raises(ObjectNotFoundError):
        store.get(k)
    with pytest.raises(FileNotFoundError):  # the built-in is caught too
        store.get_into(k, memoryview(bytearray(1)))


def test_ranged_get(backend: Backend, store: Store) -> None:
    k = key(backend, "r/range.bin")
    store.put(k, b"0123456789", CREATE)
    assert store.get_range(k, start=2, end=5) == b"234"
    assert store.get_range(k, start=7) == b"789"


# This and the next are among the slowest on the S3 servers, needed at that cost: a
# second listing page and a second delete batch exist only past 1,000 keys (planted 16
# at a time).
def test_list_in_key_order_with_pagination(backend: Backend, store: Store) -> None:
    names = [key(backend, f"list/{i:04d}.bin") for i in range(1100)]  # > one S3 page
    for n in names[:3] + names[-3:]:
        store.put(n, b"x", CREATE)
    if backend.is_s3:
        # fill the middle quickly, bypassing s3kv (only listing is under test)
        backend.raw_put_many(names[3:-3], b"x")
    else:
        for n in names[3:-3]:
            store.put(n, b"x", CREATE)
    listed = [o.key for o in store.list(key(backend, "list/"))]
    assert listed == names
    after = [o.key for o in store.list(key(backend, "list/"), start_after=names[1096])]
    assert after == names[1097:]
    assert [o.key for o in store.list(key(backend, "list/000"))] == names[:10]


def test_delete_many_in_batches(backend: Backend, store: Store) -> None:
    names = [key(backend, f"del/{i:04d}.bin") for i in range(1005)]  # two delete batches
    backend.raw_put_many(names, b"x")
    assert store.delete_many([*names, key(backend, "del/absent.bin")]) == {}
    assert list(store.list(key(backend, "del/"))) == []


def test_concurrent_create_only_puts_store_once(backend: Backend, store: Store) -> None:
    if backend.name in ("moto", "moto-server"):
        # moto checks If-None-Match, then stores, with no lock between (moto/s3/responses.py):
        # two racing PUTs can both win there, more often on a loaded machine. The client's
        # side (a 412 is "already present") is test_create_only_never_overwrites, on moto too.
        pytest.skip("moto's conditional PUT is not atomic; the race is proven on RGW and local")
    k = key(backend, "race/block.bin")
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def put() -> None:
        barrier.wait()
        results.append(store.put(k, b"same bytes", CREATE))

    threads = [threading.Thread(target=put) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1 and len(results) == 8
    assert store.get(k)[0] == b"same bytes"


def test_local_store_refuses_paths_outside_root(tmp_path) -> None:
    from s3kv import InvalidKeyError
    from s3kv.stores import LocalStore

    s = LocalStore(tmp_path / "root")
    bad_keys = ("../escape.bin", "/abs.bin", "a/../../b.bin", "a//b.bin", "a\\b.bin", "./x",
                "", "a/", "..", "a/\nb.bin", "a\x00b.bin", "a\x1f.bin", "a\x7f.bin")  # fmt: skip
    for bad in bad_keys:
        with pytest.raises(InvalidKeyError):
            s.put(bad, b"x", CREATE)
    assert not (tmp_path / "escape.bin").exists()


def test_local_store_leaves_no_temp_files(tmp_path) -> None:
    from s3kv.stores import LocalStore

    s = LocalStore(tmp_path)
    s.put("a/b/c.bin", b"data", CREATE)
    s.put("a/b/c.bin", b"data", CREATE)
    assert sorted(p.name for p in (tmp_path / "a/b").iterdir()) == ["c.bin"]
