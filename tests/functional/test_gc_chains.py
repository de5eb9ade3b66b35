"""gc keeps a prefix of every chain, and a block used after its listing (issue 28, point 4).

Chains are written as vLLM's tier writes them: each block with its parent in metadata
(``Uploader.put_blocks(..., parents=...)``). What the listing's Last-Modified says about
their order is noise (whole seconds on moto and AWS, the order blocks landed in on Ceph
RGW); the assertions only hold if gc reads the chain:

* ``--max-bytes`` on a fresh 16-block chain, three budgets: what stays is a prefix;
* ``--older-than`` whose cutoff falls between a chain's head (written first) and its tail
  (written later, as a conversation grows): the head stays with the tail;
* a block used (renewed: a copy onto itself, same ETag) after gc listed it survives, and
  ``--max-bytes`` takes the least recently used chain instead (LRU not inverted).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import s3kv.ops.gc.collect as gc_module
from s3kv import KeyMapper, Namespace, Uploader, make_offload_key
from s3kv.ops.gc.collect import gc
from s3kv.stores import open_store
from tests.conftest import Backend
from tests.functional.test_gc_races import Hooked

pytestmark = pytest.mark.functional

NS = Namespace(model_name="Qwen/Qwen3-0.6B", tokens_per_hash=16, dtype="bfloat16")
BLOCK = 256


def _chain(n: int, seed: int) -> list[bytes]:
    return [make_offload_key(bytes([seed, i]) * 16, 0) for i in range(n)]


def _store(backend: Backend, chain: list[bytes], *, parent: bytes | None = None) -> None:
    """Blocks of one chain in one job, each with its parent, as the tier writes them."""
    parents = dict(zip(chain[1:], chain))
    if parent is not None:
        parents[chain[0]] = parent
    with Uploader(backend.location, NS, settings=backend.settings, concurrency=16) as up:
        assert up.put_blocks({k: bytes([i]) * BLOCK for i, k in enumerate(chain)},
                             parents=parents).ok


def _present(backend: Backend, chain: list[bytes]) -> list[bool]:
    mapper = KeyMapper(NS, prefix="team/kv" if backend.is_s3 else "")
    listed = set(backend.raw_keys())
    return [mapper.key_for(k) in listed for k in chain]


def _is_prefix(present: list[bool]) -> bool:
    return present == sorted(present, reverse=True)


@pytest.mark.parametrize("keep", [11, 3, 8])
def test_max_bytes_keeps_a_prefix_of_a_fresh_chain(
    every_s3_backend: Backend, keep: int
) -> None:
    backend = every_s3_backend
    chain = _chain(16, seed=keep)
    _store(backend, chain)
    report = gc(backend.location, max_bytes=keep * BLOCK, settings=backend.settings)
    present = _present(backend, chain)
    assert present == [True] * keep + [False] * (16 - keep), present
    assert (report.blocks_deleted, report.blocks_kept) == (16 - keep, keep)
    # the chain was read (one HEAD a block) and each delete looked at again first
    assert report.head_requests == 16 + (16 - keep)


def test_older_than_keeps_the_head_of_a_chain_that_grew_past_the_cutoff(
    s3_backend: Backend,
) -> None:
    backend = s3_backend
    chain = _chain(12, seed=40)
    _store(backend, chain[:6])  # the first turn of a conversation
    time.sleep(2.1)
    _store(backend, chain[6:], parent=chain[5])  # the next turn, two seconds later
    store = open_store(backend.location, backend.settings)
    mapper = KeyMapper(NS, prefix="team/kv")
    written = [store.head(mapper.key_for(k)) for k in chain]
    store.close()
    head_time = max(i.last_modified for i in written[:6] if i and i.last_modified)
    # The cutoff falls between the two turns: by Last-Modified alone the head would go.
    now = head_time + timedelta(seconds=1.05) + timedelta(hours=1)
    report = gc(backend.location, older_than=3600, now=now, settings=backend.settings)
    assert _present(backend, chain) == [True] * 12
    assert report.blocks_deleted == 0
    # and once both turns are older than the cutoff, the chain goes whole
    report = gc(backend.location, older_than=3600, now=now + timedelta(seconds=10),
                settings=backend.settings)
    assert _present(backend, chain) == [False] * 12


def test_a_chain_used_after_the_listing_survives_and_the_cold_one_goes(
    every_s3_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LRU inversion of the issue: the hot chain (older on paper) is renewed while gc
    runs; a renewal keeps the ETag, so only looking again tells."""
    backend = every_s3_backend
    hot, cold = _chain(4, seed=60), _chain(4, seed=61)
    _store(backend, hot)
    time.sleep(1.1)
    _store(backend, cold)
    time.sleep(1.1)
    mapper = KeyMapper(NS, prefix="team/kv")
    user = open_store(backend.location, backend.settings)
    used: list[str] = []
    once = threading.Lock()

    def use_hot_chain(*args: Any) -> None:
        with once:  # gc looks again from several threads: each waits for the renewal
            if not used:
                _renew(hot)

    def _renew(chain: list[bytes]) -> None:
        for k in chain:  # a node renews the hot chain while gc is between listing and delete
            key = mapper.key_for(k)
            seen = user.describe(key)
            assert seen is not None and seen.info.last_modified is not None
            assert user.renew(key, unmodified_since=seen.info.last_modified,
                              metadata=seen.metadata) is not None
            used.append(key)

    real_open = gc_module.open_store
    monkeypatch.setattr(gc_module, "open_store", lambda loc, s: Hooked(
        real_open(loc, s), {"head": use_hot_chain}, {}))
    try:
        report = gc(backend.location, max_bytes=4 * BLOCK, settings=backend.settings)
    finally:
        user.close()
    assert used
    assert _present(backend, hot) == [True] * 4
    assert _present(backend, cold) == [False] * 4
    assert report.used_since_listed >= 1
    assert (report.blocks_deleted, report.blocks_kept) == (4, 4)


def test_without_chain_metadata_the_listing_decides(backend: Backend) -> None:
    """Blocks another tool wrote (vLLM's obj and fs tiers record no parent) are decided
    by Last-Modified alone, as before: gc still deletes the oldest first."""
    chain = _chain(4, seed=70)
    with Uploader(backend.location, NS, settings=backend.settings) as up:
        assert up.put_blocks({k: b"x" * BLOCK for k in chain[:2]}).ok
        time.sleep(1.1)
        assert up.put_blocks({k: b"x" * BLOCK for k in chain[2:]}).ok
    report = gc(backend.location, max_bytes=2 * BLOCK, settings=backend.settings,
                now=datetime.now(timezone.utc))
    assert _present(backend, chain) == [False, False, True, True]
    assert report.blocks_deleted == 2
