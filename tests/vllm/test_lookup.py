"""The tier's lookups under vLLM's own scheduler loop: a prefix search, not a HEAD a key."""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult, ReqContext
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

from tests.vllm import harness as h
from tests.vllm.scheduler_loop import verdicts

pytestmark = pytest.mark.vllm
ROW = 4096


def _put(s3_client: Any, bucket: str, tier: Any, keys: list[Any], body: bytes = b"k") -> None:
    """Objects written by someone else: this tier's caches know nothing of them."""
    names = [tier.uploader.keys.key_for(k) for k in keys]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: s3_client.put_object(Bucket=bucket, Key=n, Body=body), names))


def _lookup_until_answered(tier: Any, keys: list[Any], ctx: ReqContext) -> list[LookupResult]:
    for _ in range(1000):
        answers = [tier.lookup(k, ctx) for k in keys]
        if LookupResult.RETRY not in answers:
            return answers
        tier.on_schedule_end(h.END)
        time.sleep(0.005)
    raise TimeoutError("lookups still RETRY")


def _tier(make_tier: Any, rows: int = 8, **spec: Any) -> tuple[Any, np.ndarray]:
    view, array = h.primary_view(rows, ROW)
    return make_tier(view, h.spec(row_bytes=ROW, chunks=rows, **spec)), array


def test_a_half_stored_chain_costs_three_rounds(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    tier, _ = _tier(make_tier)
    chain = h.keys(256, start=1000)
    _put(s3_client, bucket, tier, chain[:128])
    (got,) = verdicts(tier, {"r": chain}).values()
    assert got.hits == 128
    m = tier._lookup_manager
    # 256 keys: fanout 8, 3 rounds; every other key is answered by the search.
    assert m.rounds <= 3 and m.heads_sent <= 26 and m.searches == 1
    assert m.inferred_answers == 256 - m.heads_sent and m.cache_answers == 0


@pytest.mark.parametrize("stored", [0, 1, 37, 64])
def test_the_boundary_is_exact(make_tier: Any, s3_client: Any, bucket: str, stored: int) -> None:
    tier, _ = _tier(make_tier)
    chain = h.keys(64, start=2000 + 100 * stored)
    _put(s3_client, bucket, tier, chain[:stored])
    (got,) = verdicts(tier, {"r": chain}).values()
    assert got.hits == stored
    assert tier._lookup_manager.searches == 1  # RETRY steps until then add no search


def test_keys_this_tier_stored_cost_no_request(make_tier: Any) -> None:
    tier, array = _tier(make_tier)
    tier.prober.presence.absent_ttl_seconds = 60.0  # a slow host must not expire them
    chain = h.keys(8, start=3000)
    h.fill(array, range(6), seed=4)
    assert h.run(tier, h.job(chain[:6], range(6), load=False)).success
    m = tier._lookup_manager
    sent = m.heads_sent
    (got,) = verdicts(tier, {"r": chain}).values()
    assert got.hits == 6
    assert m.cache_answers == 6 and m.heads_sent - sent == 2  # only the unknown tail
    h.finish(tier, "r")
    # A new request for the same chain: present answers are kept, absent ones a while.
    (again,) = verdicts(tier, {"r2": chain}).values()
    assert again.hits == 6 and m.heads_sent - sent == 2 and m.cache_answers == 14


def test_a_hole_fails_only_its_load_and_is_remembered_absent(make_tier: Any) -> None:
    writer, array = _tier(make_tier, rows=128)
    chain = h.keys(64, start=4000)
    hole = 3  # never probed by a 64-key search (0, 7, 14, ..., 63, then 36-41)
    stored = [i for i in range(40) if i != hole]
    h.fill(array, stored, seed=5)
    assert h.run(writer, h.job([chain[i] for i in stored], stored, load=False)).success

    tier, rows = _tier(make_tier, rows=128)  # another engine: cold caches
    tier.prober.presence.absent_ttl_seconds = 60.0
    m = tier._lookup_manager
    (got,) = verdicts(tier, {"r": chain}).values()
    assert got.hits == 40  # the hole is claimed present: the search never saw it
    assert m.heads_sent <= 16

    result = h.run(tier, h.job(chain[:40], range(64, 104), load=True, req="r"))
    assert not result.success
    assert set(result.successful_keys) == {chain[i] for i in stored}
    assert np.array_equal(rows[[64 + i for i in stored]], array[stored])
    # vLLM's livelock guard: this request stops before the hole ...
    (again,) = verdicts(tier, {"r": chain}).values()
    assert again.hits == hole and again.steps == 1
    h.finish(tier, "r")
    # ... and so does the next request, from the presence cache, without a request.
    sent = m.heads_sent
    (next_req,) = verdicts(tier, {"r2": chain}).values()
    assert next_req.hits == hole and m.heads_sent == sent


def test_two_requests_sharing_a_prefix(make_tier: Any, s3_client: Any, bucket: str) -> None:
    tier, _ = _tier(make_tier)
    shared, tail_a, tail_b = h.keys(48, start=5000), h.keys(80, 6000), h.keys(80, 7000)
    _put(s3_client, bucket, tier, shared + tail_b[:20])
    a, b = shared + tail_a, shared + tail_b
    # Both arrive in one step: b's batch holds only its own tail (the shared keys are
    # already a's lookups), so each search sees a chain in order.
    got = verdicts(tier, {"a": a, "b": b})
    assert (got["a"].hits, got["b"].hits) == (48, 68)
    m = tier._lookup_manager
    assert m.searches == 2 and m.heads_sent <= 2 * 26
    # A third request later: answered at once from vLLM's lookup state (a and b still
    # run), no new search.
    c = shared + tail_b[:30] + h.keys(10, start=8000)
    later = verdicts(tier, {"c": c})["c"]
    assert (later.hits, later.steps, m.searches) == (68, 1, 2)


def test_keys_out_of_order_are_searched_in_chain_order(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    tier, _ = _tier(make_tier)
    chain = h.keys(100, start=9000)
    _put(s3_client, bucket, tier, chain[:70])
    ctx = ReqContext(req_id="r")
    for i, key in enumerate(chain):
        ctx.set_offload_key_position(key, 16 * (i + 1))
    # A sliding-window scan asks from the end; positions restore the chain's order.
    answers = _lookup_until_answered(tier, chain[::-1], ctx)
    assert answers[::-1] == [LookupResult.HIT] * 70 + [LookupResult.MISS] * 30
    assert tier._lookup_manager.heads_sent <= 26


@pytest.mark.skipif(
    "sliding_window_size_in_chunks"
    not in {f.name for f in dataclasses.fields(h.OffloadingGroupConfig)},
    reason="vLLM 0.32.0 offloads no sliding-window groups (0.33.0 does)",
)
def test_a_sliding_window_group_is_probed_key_by_key(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    base = h.offloading_config(row_bytes=ROW, chunks=8)
    (full,) = base.groups
    window = dataclasses.replace(
        full,
        group_id=1,
        sliding_window_size_in_chunks=4,
        layer_names=("model.layers.2.self_attn.attn",),
    )
    config = dataclasses.replace(base, groups=(full, window))
    view, _ = h.primary_view(8, ROW)
    tier = make_tier(view, TieringOffloadingSpec(config))
    chain = h.keys(32, start=10_000, group=1)
    # Only the last window was stored: not a prefix, so no key may be inferred.
    _put(s3_client, bucket, tier, chain[-4:])
    answers = h.lookup(tier, chain)
    assert answers == [LookupResult.MISS] * 28 + [LookupResult.HIT] * 4
    m = tier._lookup_manager
    assert m.heads_sent == 32 and m.inferred_answers == 0
