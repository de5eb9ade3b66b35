"""Last use reaches S3: the tier renews what it uses (vLLM's real classes, moto's server).

``renew_after`` is 1 s here; moto lists whole seconds, so a block is due a little over a
second after it was written. Copies are counted where they are sent (the tier's
metered store): the cost claim is "at most one request per block per threshold".
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from vllm.distributed.kv_events import BlockRemoved
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.events import (
    OffloadingEventsTracker,
)
from vllm.v1.core.kv_cache_utils import BlockHash, maybe_convert_block_hash
from vllm.v1.kv_offload.base import LookupResult, OffloadingKVEventsConfig, ReqContext
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

from s3kv import InvalidInputError
from s3kv.vllm._metrics import RENEWALS, REQUESTS
from tests.vllm import harness as h
from tests.vllm import managed

pytestmark = pytest.mark.vllm
HIT, MISS = LookupResult.HIT, LookupResult.MISS
THRESHOLD = 1.0


def _modified(s3_client: Any, bucket: str, tier: Any, keys: list[bytes]) -> list[Any]:
    return [
        s3_client.head_object(Bucket=bucket, Key=tier.uploader.keys.key_for(k))["LastModified"]
        for k in keys
    ]


def _counters(tier: Any) -> dict[str, dict[tuple[str, ...], float]]:
    """What the tier reported since the last call (get_stats drains)."""
    stats = tier.get_stats()
    return stats.data["data"] if stats is not None else {}


def _copies(tier: Any) -> float:
    requests = _counters(tier).get(REQUESTS, {})
    return sum(v for labels, v in requests.items() if labels[1] == "copy")


def _stored(make_tier: Any, n: int, **options: Any) -> tuple[Any, Any, list[bytes]]:
    view, array = h.primary_view()
    tier = make_tier(view, h.spec(), renew_after=THRESHOLD, **options)
    ks = h.keys(n, start=500)
    h.fill(array, range(n), seed=5)
    # Store right after a whole second: moto's Last-Modified drops the fraction, so a
    # block written late in a second would look up to 1 s older, and be due at once.
    time.sleep(1.02 - time.time() % 1)
    assert h.run(tier, h.job(ks, list(range(n)), load=False)).success
    return tier, array, ks


def test_loads_renew_each_block_at_most_once_per_threshold(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    tier, _, ks = _stored(make_tier, 4)
    written = _modified(s3_client, bucket, tier, ks)
    copies = 0.0
    for _ in range(5):  # fresh blocks: loaded again and again, never renewed
        assert h.run(tier, h.job(ks, [4, 5, 6, 7], load=True)).success
    assert tier.renewer.flush(5)
    copies += _copies(tier)
    assert copies == 0
    time.sleep(THRESHOLD + 0.1)
    for _ in range(5):  # due now: the first load renews them, the others send nothing
        assert h.run(tier, h.job(ks, [4, 5, 6, 7], load=True)).success
        assert tier.renewer.flush(5)
    copies += _copies(tier)
    assert copies == len(ks)
    renewed = _modified(s3_client, bucket, tier, ks)
    assert all(after > before for after, before in zip(renewed, written))
    time.sleep(THRESHOLD + 0.1)  # a second threshold: one more copy each
    assert h.run(tier, h.job(ks, [4, 5, 6, 7], load=True)).success
    assert tier.renewer.flush(5)
    copies += _copies(tier)
    assert copies == 2 * len(ks)
    assert tier.renewer.renewed == 2 * len(ks)
    # and the bytes are still the ones stored (the copy moved none)
    assert h.run(tier, h.job(ks, [0, 1, 2, 3], load=True)).success


def test_renewal_off_sends_no_copy(make_tier: Any) -> None:
    view, array = h.primary_view()
    tier = make_tier(view, h.spec(), renew_after="off")
    ks = h.keys(2, start=600)
    h.fill(array, range(2), seed=6)
    assert h.run(tier, h.job(ks, [0, 1], load=False)).success
    time.sleep(THRESHOLD + 0.1)
    assert h.run(tier, h.job(ks, [2, 3], load=True)).success
    assert tier.renewer is None
    assert _copies(tier) == 0


def test_touch_alone_renews_on_another_node(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    writer, _, ks = _stored(make_tier, 3)
    written = _modified(s3_client, bucket, writer, ks)
    time.sleep(THRESHOLD + 0.1)
    view, _ = h.primary_view()
    other = make_tier(view, h.spec(), renew_after=THRESHOLD)  # never read these blocks
    ctx = ReqContext(req_id="touch")
    for i, k in enumerate(ks):
        ctx.set_offload_key_position(k, 16 * (i + 1))
    other.touch(ks, ctx)
    assert other.renewer.flush(5)
    assert other.renewer.renewed == 3 and other.renewer.heads == 3
    assert all(a > b for a, b in zip(_modified(s3_client, bucket, other, ks), written))
    other.touch(ks, ctx)  # within the threshold: nothing more is sent
    assert other.renewer.flush(5)
    assert (other.renewer.renewed, other.renewer.heads) == (3, 3)


def test_a_lookup_hit_renews_what_its_heads_saw(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    writer, _, ks = _stored(make_tier, 4)
    written = _modified(s3_client, bucket, writer, ks)
    time.sleep(THRESHOLD + 0.1)
    view, _ = h.primary_view()
    other = make_tier(view, h.spec(), renew_after=THRESHOLD)
    assert h.lookup(other, ks) == [HIT] * 4
    assert other.renewer.flush(5)
    renewed = _modified(s3_client, bucket, other, ks)
    # the prefix search HEADed some keys and inferred the rest: those it saw are renewed,
    # always including the last one it saw present, with every block before it
    changed = [a > b for a, b in zip(renewed, written)]
    assert changed[0] and any(changed)
    assert changed == sorted(changed, reverse=True)  # a prefix of the chain, never a hole
    renewals = _counters(other)[RENEWALS]
    assert {labels[1]: v for labels, v in renewals.items()} == {"renewed": sum(changed)}


def test_renew_after_takes_durations_and_refuses_nonsense(make_tier: Any) -> None:
    view, _ = h.primary_view()
    assert make_tier(view, h.spec(), renew_after="12h").renewer.renew_after == 43_200
    assert make_tier(view, h.spec(), renew_after=30).renewer.renew_after == 30
    assert make_tier(view, h.spec()).renewer.renew_after == 86_400  # the default: 1 day
    for bad in ("soon", -1, 0):
        with pytest.raises(InvalidInputError, match="renew_after"):
            make_tier(view, h.spec(), renew_after=bad)


def test_a_read_only_tier_never_renews(make_tier: Any, s3_client: Any, bucket: str) -> None:
    _stored_by, _, ks = _stored(make_tier, 2)
    time.sleep(THRESHOLD + 0.1)
    view, _ = h.primary_view()
    reader = make_tier(view, h.spec(), renew_after=THRESHOLD, read_only=True)
    assert reader.renewer is None
    assert h.run(reader, h.job(ks, [0, 1], load=True)).success
    assert _copies(reader) == 0


def test_blocks_found_gone_come_out_as_kv_events(
    moto_server: str, s3_client: Any, bucket: str
) -> None:
    """Stored through vLLM's manager, deleted behind its back, then asked for again: the
    404 becomes OffloadingEvent(removed=True), and vLLM's own events tracker turns it
    into a BlockRemoved for exactly the deleted blocks."""
    url = f"s3://{bucket}/team/kv"
    entry = managed.s3_entry(url, endpoint_url=moto_server, enable_kv_events=True)
    config = dataclasses.replace(
        h.offloading_config(secondary_tiers=[entry], engine_id="s3kv-events"),
        enable_kv_cache_events=True,
    )
    manager = TieringOffloadingSpec(config).get_manager()
    try:
        ks = h.keys(4, start=700)
        managed.store(manager, ks, seed=7)
        stored = list(manager.take_events())
        assert any(not e.removed for e in stored)
        tier = manager.secondary_tiers[0]
        gone = ks[2:]
        for k in gone:
            s3_client.delete_object(Bucket=bucket, Key=tier.uploader.keys.key_for(k))
        verdicts, _ = managed.load(manager, ks)
        managed.settle(manager)
        assert verdicts[:2] == [HIT, HIT]
        events = list(manager.take_events())
        removed = [e for e in events if e.removed and e.ownership is None]
        assert [sorted(e.keys) for e in removed if e.medium == tier.medium] == [sorted(gone)]
        tracker = OffloadingEventsTracker(OffloadingKVEventsConfig(
            enable_kv_cache_events=True, self_describing_kv_events=False))
        kv_events = [e for e in tracker.take_events(removed) if isinstance(e, BlockRemoved)]
        announced = sorted(x for e in kv_events for x in e.block_hashes)
        assert announced == sorted(maybe_convert_block_hash(BlockHash(k[:-4])) for k in gone)
        # reported once: asking again sends no second removal
        managed.load(manager, ks)
        managed.settle(manager)
        assert not [e for e in manager.take_events() if e.removed and e.medium == tier.medium]
    finally:
        manager.shutdown()
