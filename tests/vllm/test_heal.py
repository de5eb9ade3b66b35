"""What a load meets that the tier acts on (issue 40, point 6; issue 38, point 5): a
damaged block is replaced by the next store of its key, so the hit after it loads; a block
stored without a checksum is counted and said once, and ``require_checksum`` refuses it.
vLLM's own classes on moto's server, both data paths."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult

from s3kv import InvalidInputError, SettingsError
from tests.vllm import harness as h

pytestmark = pytest.mark.vllm


@pytest.fixture(params=["crt", "botocore"])
def data_path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _stored(make_tier: Any, start: int, **options: Any) -> tuple[Any, np.ndarray, list[Any]]:
    view, array = h.primary_view()
    tier = make_tier(view, h.spec(), **options)
    ks = h.keys(4, start=start)
    h.fill(array, range(4), seed=start)
    assert h.run(tier, h.job(ks, range(4), load=False)).success
    return tier, array, ks


def _damage(s3_client: Any, bucket: str, key: str) -> None:
    """Other bytes of the same size under the same metadata: only the checksum can tell."""
    head = s3_client.head_object(Bucket=bucket, Key=key)
    body = np.random.default_rng(7).bytes(head["ContentLength"])
    s3_client.put_object(Bucket=bucket, Key=key, Body=body, Metadata=head["Metadata"])


def _stat(tier: Any, name: str, *labels: str) -> float:
    stats = tier.get_stats()
    data = stats.data["data"] if stats is not None else {}
    return float(data.get(f"vllm:kv_offload_s3kv_{name}", {}).get((tier.metrics.tier, *labels), 0))


def test_a_damaged_block_is_healed_by_the_next_store_of_its_key(
    make_tier: Any, s3_client: Any, bucket: str, data_path: str
) -> None:
    tier, array, ks = _stored(make_tier, 700, data_path=data_path)
    key = tier.uploader.keys.key_for(ks[2])
    _damage(s3_client, bucket, key)
    assert h.lookup(tier, ks, req="hit") == [LookupResult.HIT] * 4
    result = h.run(tier, h.job(ks, range(4, 8), load=True, req="hit"))
    assert set(result.successful_keys or ()) == {ks[0], ks[1], ks[3]}  # vLLM recomputes ks[2]
    h.finish(tier, "hit")
    # the recompute is stored as vLLM stores it: the whole chain, create-only but for the
    # damaged copy, which is replaced (If-Match on the ETag the load saw)
    assert h.run(tier, h.job(ks, range(4), load=False, req="recompute")).success
    body = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == array[2].tobytes()
    assert tier.uploader.healed == 1 and _stat(tier, "healed_blocks") == 1
    # the hit after that loads every block
    assert h.lookup(tier, ks, req="again") == [LookupResult.HIT] * 4
    assert h.run(tier, h.job(ks, range(4, 8), load=True, req="again")).success
    assert np.array_equal(array[4:8], array[0:4])


def test_a_damaged_copy_replaced_meanwhile_is_left_alone(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    tier, array, ks = _stored(make_tier, 720)
    key = tier.uploader.keys.key_for(ks[0])
    _damage(s3_client, bucket, key)
    assert not h.run(tier, h.job(ks[:1], range(4, 5), load=True)).success
    theirs = array[0].tobytes()  # another node healed it first: another ETag
    s3_client.put_object(Bucket=bucket, Key=key, Body=theirs, Metadata=s3_client.head_object(
        Bucket=bucket, Key=key)["Metadata"])  # fmt: skip
    h.fill(array, range(1), seed=99)  # this node's bytes differ: they must not land
    assert h.run(tier, h.job(ks[:1], range(1), load=False)).success  # already present
    assert s3_client.get_object(Bucket=bucket, Key=key)["Body"].read() == theirs
    assert tier.uploader.healed == 0 and not tier.uploader.damaged


def test_blocks_without_a_checksum_are_counted_and_said_once(
    make_tier: Any, s3_client: Any, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="s3kv")
    tier, array, ks = _stored(make_tier, 740)
    for i, k in enumerate(ks):  # as vLLM's obj tier writes them: no s3kv metadata
        s3_client.put_object(Bucket=bucket, Key=tier.uploader.keys.key_for(k),
                             Body=array[i].tobytes())  # fmt: skip
    for req in ("one", "two"):
        assert h.run(tier, h.job(ks, range(4, 8), load=True, req=req)).success
    assert np.array_equal(array[4:8], array[0:4])
    assert _stat(tier, "unverified_blocks", "loaded") == 8
    said = [r.getMessage() for r in caplog.records if "without a checksum" in r.getMessage()]
    assert len(said) == 1 and "require_checksum" in said[0]


def test_require_checksum_refuses_blocks_without_one(
    make_tier: Any, s3_client: Any, bucket: str, data_path: str
) -> None:
    writer, array, ks = _stored(make_tier, 760)
    for i in (1, 3):  # two of them rewritten without s3kv's metadata
        s3_client.put_object(Bucket=bucket, Key=writer.uploader.keys.key_for(ks[i]),
                             Body=array[i].tobytes())  # fmt: skip
    view, rows = h.primary_view()
    rows[:] = 0x5A
    tier = make_tier(view, h.spec(), require_checksum=True, data_path=data_path)
    # lookups see which blocks carry none (vLLM's prefix then ends before the first)
    hit, miss = LookupResult.HIT, LookupResult.MISS
    assert h.lookup(tier, ks, req="look") == [hit, miss, hit, miss]
    h.finish(tier, "look")
    result = h.run(tier, h.job(ks, range(4), load=True, req="load"))  # loaded anyway
    assert set(result.successful_keys or ()) == {ks[0], ks[2]}
    assert np.array_equal(rows[[0, 2]], array[[0, 2]])
    assert not rows[1].any() and not rows[3].any()  # refused, zeroed
    assert _stat(tier, "unverified_blocks", "refused") == 2


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("wait_budget_seconds", 0, "wait_budget_seconds 0 is not a positive number"),
        ("wait_budget_seconds", "2s", "wait_budget_seconds '2s' is not a positive number"),
        ("breaker_failures", 0, "breaker_failures 0 is not a whole number of at least 1"),
        ("breaker_failures", 2.5, "breaker_failures 2.5 is not a whole number"),
        ("require_checksum", "false", "require_checksum 'false' is not true or false"),
    ],
)
def test_bad_day_options_are_checked_at_start(
    make_tier: Any, option: str, value: Any, error: str
) -> None:
    view, _ = h.primary_view()
    with pytest.raises(InvalidInputError, match=error) as info:
        make_tier(view, h.spec(), **{option: value})
    assert not isinstance(info.value, SettingsError)  # a tier option, not a connection one
