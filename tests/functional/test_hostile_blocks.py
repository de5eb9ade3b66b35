"""Hostile and unlucky inputs to the library (issue 12 part B), on each data path (`backend`):
buffers that are not what they seem, blocks without s3kv's checksum metadata, failures
after bytes landed, keys given twice, transfers used after close()."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
import pytest

from s3kv import (
    ClosedError,
    Downloader,
    InvalidInputError,
    KeyMapper,
    Namespace,
    Uploader,
    make_offload_key,
)
from tests.conftest import Backend

pytestmark = pytest.mark.functional

NS = Namespace(model_name="hostile/model", tokens_per_hash=16, dtype="bfloat16")
BLOCK = 4096


def chain(n: int) -> list[bytes]:
    return [make_offload_key(os.urandom(32), 0) for _ in range(n)]


def uploader(backend: Backend, **kw: object) -> Uploader:
    return Uploader(backend.location, NS, settings=backend.settings, **kw)  # type: ignore[arg-type]


def downloader(backend: Backend, **kw: object) -> Downloader:
    return Downloader(backend.location, NS, settings=backend.settings, **kw)  # type: ignore[arg-type]


def object_key(backend: Backend, key: bytes) -> str:
    return KeyMapper(NS, prefix="team/kv" if backend.is_s3 else "").key_for(key)


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, BLOCK), dtype=np.uint8)


# -- point 5: one buffer check before any request --------------------------------------


def test_a_strided_view_is_refused_up_front_for_loads_and_stores(backend: Backend) -> None:
    keys = chain(1)
    strided = np.zeros((BLOCK, 2), np.uint8)[:, 0]  # 1-D, format "B", not contiguous
    with uploader(backend) as up:
        with pytest.raises(InvalidInputError, match="not contiguous"):
            up.submit_put_blocks({keys[0]: strided})
        up.put_blocks({keys[0]: np.ones(BLOCK, np.uint8)})
    with downloader(backend) as down:
        with pytest.raises(ValueError, match="not contiguous"):  # InvalidInputError is one
            down.submit_get_blocks(keys, into=[strided])
        with pytest.raises(InvalidInputError, match="empty"):
            down.submit_get_blocks(keys, into=[bytearray(0)])
        with pytest.raises(InvalidInputError, match="not contiguous"):
            down.get_blocks(keys, into={keys[0]: strided})
        # what is refused cost no request and left the job machinery sound
        out = np.zeros(BLOCK, np.uint8)
        assert down.get_blocks(keys, into=[out]).loaded == (keys[0],) and out.all()


def test_rows_that_are_no_plain_memory_are_refused_naming_the_block(
    backend: Backend, tmp_path: Path
) -> None:
    """Issue 38, point 5: a numpy object array loaded into (its memory is pointers: "1
    loaded", then SIGSEGV), a closed mmap (a raw ValueError) and an ``into`` mapping
    without a key's buffer (a raw KeyError showing binary bytes): each an
    InvalidInputError naming the block, before any request."""
    keys = chain(2)
    with uploader(backend) as up:
        assert up.put_blocks(dict(zip(keys, rows(2)))).ok
        objects = np.empty(BLOCK // 8, dtype=object)
        with pytest.raises(InvalidInputError, match=f"{keys[0].hex()}.*format 'O'"):
            up.submit_put_blocks({keys[0]: objects})
    backing = tmp_path / "rows"
    backing.write_bytes(bytes(BLOCK))
    with open(backing, "r+b") as f:
        closed = mmap.mmap(f.fileno(), BLOCK)
    closed.close()
    with downloader(backend) as down:
        with pytest.raises(InvalidInputError, match=f"{keys[0].hex()}.*format 'O'"):
            down.submit_get_blocks(keys[:1], into=[np.empty(BLOCK // 8, dtype=object)])
        with pytest.raises(InvalidInputError, match=f"{keys[0].hex()}.*cannot be read"):
            down.submit_get_blocks(keys[:1], into=[closed])
        with pytest.raises(InvalidInputError, match=f"no buffer for block {keys[1].hex()}"):
            down.submit_get_blocks(keys, into={keys[0]: bytearray(BLOCK)})
        out = np.zeros((2, BLOCK), np.uint8)  # what was refused left the machinery sound
        assert down.get_blocks(keys, into=list(out)).ok and np.array_equal(out, rows(2))


def test_odd_formats_are_cast_to_bytes(backend: Backend) -> None:
    keys = chain(1)
    block = np.arange(BLOCK // 4, dtype=np.float32)
    with uploader(backend) as up:
        assert up.put_blocks({keys[0]: block}).stored == (keys[0],)
    out = np.zeros(BLOCK // 4, np.float32)
    with downloader(backend) as down:
        assert down.get_blocks(keys, into=[out]).ok
    np.testing.assert_array_equal(out, block)


# -- point 4: a failure after bytes may have landed zeroes the buffer ------------------


def test_truncated_and_empty_blocks_leave_a_zeroed_buffer(backend: Backend) -> None:
    keys = chain(3)
    data = rows(3)
    with uploader(backend) as up:
        up.put_blocks(dict(zip(keys, data)))
    backend.raw_put(object_key(backend, keys[0]), data[0].tobytes()[:-7])  # truncated
    backend.raw_put(object_key(backend, keys[1]), b"")  # 0 bytes
    out = np.full_like(data, 7)
    with downloader(backend) as down:
        got = down.get_blocks(keys, into=list(out))
    assert set(got.failed) == {keys[0], keys[1]} and got.loaded == (keys[2],)
    assert not out[0].any() and not out[1].any()  # no stale bytes mistaken for data
    np.testing.assert_array_equal(out[2], data[2])


# -- point 3: blocks without s3kv's checksum metadata ----------------------------------


def test_checksumless_blocks_are_size_checked_and_counted_unverified(backend: Backend) -> None:
    keys = chain(5)
    data = rows(5, seed=3)
    with uploader(backend) as up:
        up.put_blocks({keys[4]: data[4]})  # one block as s3kv writes it (manifest first)
    flipped = data[1].copy()
    flipped[9] ^= 0xFF
    # as vLLM's obj tier or another client writes them: no metadata at all
    backend.raw_put(object_key(backend, keys[0]), data[0].tobytes())
    backend.raw_put(object_key(backend, keys[1]), flipped.tobytes())
    backend.raw_put(object_key(backend, keys[2]), b"")
    backend.raw_put(object_key(backend, keys[3]), data[3].tobytes()[:100])
    # "unverified" is a block read from S3 without a recorded checksum; a directory
    # records none by design, so its blocks are never counted.
    unverified = {keys[0], keys[1]} if backend.is_s3 else set()

    out = np.full_like(data, 5)
    with downloader(backend) as down:
        into = down.get_blocks(keys, into=list(out))
    assert set(into.loaded) == {keys[0], keys[1], keys[4]}
    assert set(into.failed) == {keys[2], keys[3]}
    assert set(into.unverified_keys) == unverified
    assert into.unverified == len(into.unverified_keys)
    assert set(into.unverified_keys) <= set(into.done)
    assert ("unverified" in into.summary()) == backend.is_s3
    assert not out[2].any() and not out[3].any()

    # Without buffers: a 0-byte block is never valid; the size comes from block_size_bytes
    with downloader(backend, block_size_bytes=BLOCK) as down:
        plain = down.get_blocks(keys)
    assert set(plain.failed) == {keys[2], keys[3]}
    assert "0 bytes" in plain.failed[keys[2]]
    assert keys[2] not in plain.data and keys[3] not in plain.data
    assert plain.data[keys[1]] == flipped.tobytes()  # same size: unverifiable, so flagged
    assert (keys[1] in plain.unverified_keys) == backend.is_s3

    # ... or is learned from a block whose checksum verified (S3) on this Downloader
    with downloader(backend) as down:
        got = down.get_blocks([keys[2]])
        assert keys[2] in got.failed and "0 bytes" in got.failed[keys[2]]
        if backend.is_s3:
            assert down.get_blocks([keys[4]]).ok
            assert keys[3] in down.get_blocks([keys[3]]).failed


# -- point 10: keys twice, use after close ----------------------------------------------


def test_a_key_given_twice_is_refused_up_front(backend: Backend) -> None:
    keys = chain(2)
    with uploader(backend) as up:
        with pytest.raises(InvalidInputError, match="twice"):
            up.put_blocks([(keys[0], b"a" * 8), (keys[1], b"b" * 8), (keys[0], b"a" * 8)])
        report = up.put_blocks([(keys[0], b"a" * 8), (keys[1], b"b" * 8)])
    assert set(report.done) == set(keys) and not report.already_present
    with downloader(backend) as down, pytest.raises(InvalidInputError, match="twice"):
        down.get_blocks([keys[0], keys[0]], into=[bytearray(8), bytearray(8)])


def test_a_closed_transfer_refuses_work(backend: Backend) -> None:
    keys = chain(1)
    up = uploader(backend)
    up.put_blocks({keys[0]: b"c" * 8})
    up.close()
    with pytest.raises(ClosedError, match="closed"):
        up.put_blocks({keys[0]: b"c" * 8})
    with pytest.raises(ClosedError):
        up.submit_put_blocks({keys[0]: b"c" * 8})
    down = downloader(backend)
    down.close()
    for call in (
        lambda: down.get_blocks(keys),
        lambda: down.submit_get_blocks(keys, into=[bytearray(8)]),
        lambda: down.lookup(keys),
        lambda: down.contains(keys),
        lambda: down.get_range(keys[0], start=0),
    ):
        with pytest.raises(ClosedError):
            call()
    up.close()  # closing twice is harmless


# -- points 2 and 10: a directory's writes fail with their cause, and stay inside -------


def test_local_writes_fail_with_their_cause_and_never_leave_the_root(tmp_path) -> None:
    from s3kv import StoreError
    from s3kv.stores import LocalStore, PutOptions

    root, outside = tmp_path / "root", tmp_path / "outside"
    store = LocalStore(root)
    outside.mkdir()
    root.mkdir()
    (root / "file").write_bytes(b"in the way")
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "ok").mkdir()
    (root / "ok" / "b.bin").symlink_to(outside / "b.bin")
    cases = {
        "m" * 300 + "/a.bin": "too long",
        "file/a.bin": "not a directory",
        "link/a.bin": "symlink",
        "link/deeper/a.bin": "symlink",
    }
    for key, cause in cases.items():
        with pytest.raises(StoreError, match=cause):
            store.put(key, b"data", PutOptions())
    # a symlink or a folder where the block goes is refused: never written through, and
    # never counted as the block being there (a folder once made pull say "already present")
    with pytest.raises(StoreError, match="a symbolic link is in the way of the file"):
        store.put("ok/b.bin", b"data", PutOptions(create_only=True))
    (root / "ok" / "d.bin").mkdir()
    with pytest.raises(StoreError, match="a folder is in the way of the file"):
        store.put("ok/d.bin", b"data", PutOptions(create_only=True))
    staged = store.stage("ok/d.bin")
    try:
        Path(staged.path).write_bytes(b"data")
        with pytest.raises(StoreError, match="a folder is in the way of the file"):
            staged.publish(True)
    finally:
        staged.close()
    assert list(outside.iterdir()) == []
    assert not [p for p in root.rglob("*.tmp")]
    assert store.put("ok/c.bin", b"data", PutOptions()) is True
