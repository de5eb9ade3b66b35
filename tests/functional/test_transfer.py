"""Uploader and Downloader on each data path (`backend`: moto, moto's server, a directory)."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

from s3kv import (
    Downloader,
    InvalidInputError,
    KeyMapper,
    ManifestError,
    ManifestMismatchError,
    ManifestMissingError,
    Namespace,
    NamespaceConflictError,
    Uploader,
    make_offload_key,
)
from s3kv.naming.manifest import PROVENANCE_FIELD
from tests.conftest import Backend

pytestmark = pytest.mark.functional

NS = Namespace(
    model_name="meta-llama/Llama-3.1-8B-Instruct",
    tokens_per_hash=16,
    dtype="bfloat16",
    kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["layers.0", "layers.1"]}],
)


def chain(n: int, group: int = 0) -> list[bytes]:
    return [make_offload_key(os.urandom(32), group) for _ in range(n)]


def uploader(backend: Backend, ns: Namespace = NS, **kw: object) -> Uploader:
    return Uploader(backend.location, ns, settings=backend.settings, **kw)  # type: ignore[arg-type]


def downloader(backend: Backend, ns: Namespace = NS, **kw: object) -> Downloader:
    return Downloader(backend.location, ns, settings=backend.settings, **kw)  # type: ignore[arg-type]


def object_key(backend: Backend, key: bytes, ns: Namespace = NS) -> str:
    prefix = "team/kv" if backend.is_s3 else ""
    return KeyMapper(ns, prefix=prefix).key_for(key)


# Among the slowest (2,000 requests on moto's server), needed: a batch many windows long
# is where the pipeline's refill, the report's bookkeeping and zero-copy rows meet.
def test_thousand_random_blocks_round_trip(backend: Backend) -> None:
    keys = chain(1000)
    rows = np.random.default_rng(1).integers(0, 256, (1000, 2048), dtype=np.uint8)
    with uploader(backend) as up:
        report = up.put_blocks(dict(zip(keys, rows)))
    assert report.ok and len(report.stored) == 1000 and report.bytes == rows.nbytes
    assert set(report.stored) == set(keys)
    out = np.zeros_like(rows)
    with downloader(backend) as down:
        got = down.get_blocks(keys, into=list(out))
    assert got.ok and len(got.loaded) == 1000
    np.testing.assert_array_equal(out, rows)
    assert got.unverified == 0  # S3: checksums recorded; a directory records none by design
    # the manifest is vLLM's exact config.json plus s3kv's record (when, which s3kv; never
    # hashed), written before the blocks
    manifest = KeyMapper(NS, prefix="team/kv" if backend.is_s3 else "").config_key()
    written = json.loads(backend.raw_get(manifest))
    assert set(written.pop(PROVENANCE_FIELD)) == {"created", "s3kv_version", "vllm_version"}
    assert json.dumps(written, indent=2, sort_keys=True).encode() == NS.manifest_bytes()


def test_second_upload_rewrites_nothing(backend: Backend) -> None:
    keys = chain(20)
    blocks = {k: os.urandom(1000) for k in keys}
    with uploader(backend) as up:
        assert len(up.put_blocks(blocks).stored) == 20
        again = up.put_blocks({k: b"\x00" * 1000 for k in keys})
    assert again.ok and again.stored == () and set(again.already_present) == set(keys)
    for k in keys[:3]:
        assert backend.raw_get(object_key(backend, k)) == blocks[k]


def test_two_uploaders_racing_store_each_block_once(every_backend: Backend) -> None:
    # "once" is the server's atomic create-only PUT: proven where the server keeps it (Ceph,
    # a directory); moto checks then stores without a lock (see test_store.py).
    backend = every_backend
    if backend.name in ("moto", "moto-server"):
        pytest.skip("moto's conditional PUT is not atomic; the race is proven on RGW and local")
    keys = chain(200)
    blocks = {k: os.urandom(512) for k in keys}
    reports = []
    barrier = threading.Barrier(2)

    def run() -> None:
        with uploader(backend) as up:
            barrier.wait()
            reports.append(up.put_blocks(blocks))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = reports
    assert a.ok and b.ok
    assert not set(a.stored) & set(b.stored)
    assert set(a.stored) | set(b.stored) == set(keys)
    assert set(a.stored) | set(a.already_present) == set(keys)


def test_accepts_hash_group_pairs_and_views(backend: Backend) -> None:
    h = os.urandom(16)
    data = bytearray(os.urandom(300))
    with uploader(backend) as up:
        report = up.put_blocks([((h, 3), memoryview(data))])
    assert report.stored == (make_offload_key(h, 3),)
    with downloader(backend) as down:
        got = down.get_blocks([(h, 3)])
        assert got.data[make_offload_key(h, 3)] == bytes(data)
        assert down.get_range((h, 3), start=10, end=20) == bytes(data[10:20])


def test_manifest_conflict(backend: Backend) -> None:
    other = NS.model_copy_validated(tokens_per_hash=32)
    prefix = "team/kv" if backend.is_s3 else ""
    # a different run config planted under our folder's manifest key
    backend.raw_put(KeyMapper(NS, prefix=prefix).config_key(), other.manifest_bytes())
    with uploader(backend) as up, pytest.raises(NamespaceConflictError) as info:
        up.put_blocks({chain(1)[0]: b"x" * 10})
    assert '"tokens_per_hash": 32' in str(info.value).replace("'", '"')
    assert backend.raw_keys(prefix + "/" if prefix else "") == [
        KeyMapper(NS, prefix=prefix).config_key()
    ]  # no block written without a good manifest
    with downloader(backend) as down, pytest.raises(ManifestMismatchError, match="hash to"):
        down.verify_manifest()


def test_unreadable_manifest(backend: Backend) -> None:
    prefix = "team/kv" if backend.is_s3 else ""
    backend.raw_put(KeyMapper(NS, prefix=prefix).config_key(), b"{broken")
    with uploader(backend) as up, pytest.raises(ManifestError, match="not valid JSON"):
        up.ensure_manifest()


def test_missing_manifest_is_readable_only_when_asked(backend: Backend) -> None:
    key = chain(1)[0]
    backend.raw_put(object_key(backend, key), b"abc")
    with downloader(backend) as down, pytest.raises(ManifestMissingError):
        down.get_blocks([key])
    with downloader(backend, require_manifest=False) as down:
        got = down.get_blocks([key])
    assert got.data[key] == b"abc" and got.unverified == (1 if backend.is_s3 else 0)


def test_corrupted_block_is_reported_and_never_handed_over(every_s3_backend: Backend) -> None:
    # on Ceph too: RGW 16 ignores x-amz-checksum-crc32c, so only s3kv's metadata check
    # stands between a replaced object and the caller there (docs/library.md says so)
    backend = every_s3_backend
    keys = chain(4)
    rows = np.random.default_rng(2).integers(0, 256, (4, 4096), dtype=np.uint8)
    with uploader(backend) as up:
        up.put_blocks(dict(zip(keys, rows)))
    flipped = rows[1].copy()
    flipped[100] ^= 0xFF
    backend.tamper(object_key(backend, keys[1]), flipped.tobytes())  # checksum metadata kept
    backend.raw_put(object_key(backend, keys[2]), rows[2].tobytes()[:-1])  # truncated
    out = np.full_like(rows, 7)
    with downloader(backend) as down:
        got = down.get_blocks(keys, into=list(out))
    assert set(got.loaded) == {keys[0], keys[3]}
    assert set(got.failed) == {keys[1], keys[2]}
    assert "checksum mismatch" in got.failed[keys[1]]
    assert "4095 bytes, expected 4096" in got.failed[keys[2]]
    assert not out[1].any()  # corrupt bytes wiped
    np.testing.assert_array_equal(out[[0, 3]], rows[[0, 3]])
    with downloader(backend) as down:
        plain = down.get_blocks([keys[1]])
    assert keys[1] in plain.failed and keys[1] not in plain.data


def test_truncated_block_in_a_directory_is_caught_by_size(backend: Backend) -> None:
    keys = chain(2)
    with uploader(backend) as up:
        up.put_blocks({k: b"y" * 64 for k in keys})
    backend.raw_put(object_key(backend, keys[0]), b"y" * 63)
    bufs = [bytearray(64), bytearray(64)]
    with downloader(backend) as down:
        got = down.get_blocks(keys, into=bufs)
    assert list(got.failed) == [keys[0]] and got.loaded == (keys[1],)


def test_lookup_prefix_hits_in_few_round_trips(backend: Backend) -> None:
    keys = chain(300)
    with uploader(backend) as up:
        up.put_blocks({k: b"z" * 32 for k in keys[:190]})
    with downloader(backend) as down:
        assert down.lookup(keys) == 190
        assert down.last_lookup.rounds <= 3 and down.last_lookup.requests <= 26
        assert down.lookup(keys[:100]) == 100
        assert down.lookup(chain(5)) == 0
        assert down.lookup([]) == 0
        assert down.contains([keys[0], keys[200]]) == [True, False]


def test_lookup_with_a_hole_and_a_claimed_block_that_is_gone(backend: Backend) -> None:
    keys = chain(64)
    with uploader(backend) as up:
        up.put_blocks({k: b"h" * 16 for i, k in enumerate(keys[:40]) if i != 5})
    with downloader(backend) as down:
        hits = down.lookup(keys)
        # a boundary: the block before it was seen present, the block at it absent
        assert hits == 40 or hits == 5
        got = down.get_blocks(keys[:hits])
    if hits == 40:
        assert got.missing == (keys[5],)  # the hole fails its load cleanly
        assert keys[5] not in got.data
    assert not got.failed


def test_load_buffers_are_validated(backend: Backend) -> None:
    keys = chain(2)
    with uploader(backend) as up:
        up.put_blocks({k: b"q" * 8 for k in keys})
    with downloader(backend) as down:
        with pytest.raises(InvalidInputError, match="read-only"):
            down.get_blocks(keys, into=[b"\x00" * 8, b"\x00" * 8])
        with pytest.raises(InvalidInputError, match="one buffer per key"):
            down.get_blocks(keys, into=[bytearray(8)])
        wrong = down.get_blocks(keys, into=[bytearray(9), bytearray(8)])
    assert "8 bytes, expected 9" in wrong.failed[keys[0]]


@pytest.mark.parametrize("interrupt", ["cancel", "close"])
def test_interrupted_upload_rerun_stores_exactly_the_missing(
    backend: Backend, interrupt: str
) -> None:
    """Cancelled (``job.cancel()``) or closed under it (``close(wait=False)``), a batch
    reports every block once, and a re-run stores exactly what did not land."""
    keys = chain(120)
    blocks = {k: os.urandom(256) for k in keys}
    with uploader(backend, concurrency=2) as up:
        job = up.submit_put_blocks(blocks)
        job.cancel() if interrupt == "cancel" else up.close(wait=False)
        first = job.wait(60)
    assert set(first.stored) | set(first.failed) == set(keys)
    assert all(r == "cancelled" for r in first.failed.values())
    with uploader(backend) as up:
        second = up.put_blocks(blocks)
    # A PUT in flight when cancelled may still land (the store took it before the
    # cancel): reported cancelled, and present on the re-run. Nothing lost, none twice.
    landed_anyway = set(first.failed) - set(second.stored)
    assert set(second.stored) <= set(first.failed)
    assert set(second.already_present) == set(first.stored) | landed_anyway
    with downloader(backend) as down:
        assert down.lookup(keys) == 120


def test_submit_is_non_blocking_and_reports_once_done(backend: Backend) -> None:
    keys = chain(30)
    with uploader(backend) as up:
        job = up.submit_put_blocks({k: b"n" * 128 for k in keys})
        report = job.wait(60)
        assert job.done()
    assert report.ok and len(report.stored) == 30
    with downloader(backend) as down:
        bufs = [bytearray(128) for _ in keys]
        job = down.submit_get_blocks(keys, into=bufs)
        assert job.wait(60).ok and all(b == bytearray(b"n" * 128) for b in bufs)


def test_block_larger_than_a_transport_part_round_trips(every_s3_backend: Backend) -> None:
    # 20 MiB: one PUT, but awscrt fetches it in 8 MiB ranged parts (offsets must land right);
    # on Ceph too, over TLS: the ranged answers are the server's
    s3_backend = every_s3_backend
    keys = chain(1)
    block = np.random.default_rng(9).integers(0, 256, 20 * 1024 * 1024, dtype=np.uint8)
    with uploader(s3_backend) as up:
        assert up.put_blocks({keys[0]: block}).stored == (keys[0],)
    out = np.zeros_like(block)
    with downloader(s3_backend) as down:
        assert down.get_blocks(keys, into=[out]).ok
        assert down.get_blocks(keys).data[keys[0]] == block.tobytes()
        short = down.get_blocks(keys, into=[bytearray(len(block) - 1)])
    np.testing.assert_array_equal(out, block)
    assert "expected 20971519" in short.failed[keys[0]]
