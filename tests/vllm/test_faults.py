"""Faults on the tier's own S3 client: the job fails for exactly the affected keys and
nothing wrong reaches the primary rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult

from tests.functional.faults import BodyReset, Faults
from tests.vllm import harness as h

pytestmark = pytest.mark.vllm
SENTINEL = 0x5A


# botocore hooks inject these faults, so these tiers use boto3's data path, in this process
# (the hooks are on the data path's client); the awscrt path, in the I/O process too, is
# faulted on the wire (tests/vllm/test_wire_faults.py).
HOOKED = {"data_path": "botocore", "io_process": "off"}


def _stored(
    make_tier: Any, n: int, start: int, **options: Any
) -> tuple[Any, np.ndarray, list[Any]]:
    """A tier with ``n`` blocks stored from rows 0..n-1; rows n.. hold a sentinel."""
    view, array = h.primary_view()
    tier = make_tier(view, h.spec(), **(options or HOOKED))
    ks = h.keys(n, start=start)
    h.fill(array, range(n), seed=start)
    assert h.run(tier, h.job(ks, range(n), load=False)).success
    array[n:] = SENTINEL
    return tier, array, ks


def _key(tier: Any, key: bytes) -> str:
    return str(tier.uploader.keys.key_for(key))


def _load_fails_for(tier: Any, array: np.ndarray, ks: list[Any], bad: set[int]) -> None:
    n = len(ks)
    assert h.lookup(tier, ks) == [LookupResult.HIT] * n
    result = h.run(tier, h.job(ks, range(n, 2 * n), load=True))
    assert not result.success
    assert set(result.successful_keys or ()) == {k for i, k in enumerate(ks) if i not in bad}
    for i in range(n):
        if i in bad:
            # The row is never left holding a partial or foreign block.
            assert set(np.unique(array[n + i]).tolist()) <= {0, SENTINEL}
        else:
            assert np.array_equal(array[n + i], array[i])
    # Failed keys stop being offered while the request runs (vLLM's livelock guard).
    answers = h.lookup(tier, ks)
    assert [i for i, a in enumerate(answers) if a is LookupResult.MISS] == sorted(bad)
    h.finish(tier)


def test_throttled_load_fails_only_that_key(make_tier: Any) -> None:
    tier, array, ks = _stored(make_tier, 4, start=100)
    target = _key(tier, ks[1])
    faults = Faults(h.data_path(tier).store.client,
                    lambda op, key, n: "503" if op == "GetObject" and key == target else None)
    _load_fails_for(tier, array, ks, bad={1})
    assert {(op, key) for op, key, _ in faults.injected} == {("GetObject", target)}


def test_throttling_that_clears_is_retried(make_tier: Any) -> None:
    tier, array, ks = _stored(make_tier, 4, start=110)
    Faults(h.data_path(tier).store.client,
           lambda op, key, n: "503" if op == "GetObject" and n == 1 else None)
    result = h.run(tier, h.job(ks, range(4, 8), load=True))
    assert result.success
    assert np.array_equal(array[4:8], array[0:4])


def test_throttled_store_fails_and_writes_only_the_others(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    view, array = h.primary_view()
    tier = make_tier(view, h.spec(), **HOOKED)
    ks = h.keys(4, start=120)
    h.fill(array, range(4), seed=120)
    target = _key(tier, ks[2])
    Faults(h.data_path(tier).store.client,
           lambda op, key, n: "503" if op == "PutObject" and key == target else None)
    result = h.run(tier, h.job(ks, range(4), load=False))
    assert not result.success
    stored = {o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert {k for k in stored if k.endswith(".bin")} == {_key(tier, k) for i, k in
                                                       enumerate(ks) if i != 2}


def test_dropped_connection_fails_only_that_key(make_tier: Any) -> None:
    tier, array, ks = _stored(make_tier, 4, start=130)
    target = _key(tier, ks[0])
    Faults(h.data_path(tier).store.client,
           lambda op, key, n: "reset" if op == "GetObject" and key == target else None)
    _load_fails_for(tier, array, ks, bad={0})


def test_connection_cut_mid_body_leaves_no_partial_row(make_tier: Any) -> None:
    tier, array, ks = _stored(make_tier, 4, start=140)
    target = _key(tier, ks[3])
    cut = BodyReset(h.data_path(tier).store.client, lambda key, n: key == target,
                    after=h.ROW_BYTES // 3)
    _load_fails_for(tier, array, ks, bad={3})
    assert cut.cuts >= 1
    assert not array[7].any()  # a third of the block arrived and was wiped


def test_corrupt_object_fails_only_that_key(make_tier: Any, s3_client: Any, bucket: str) -> None:
    tier, array, ks = _stored(make_tier, 4, start=150)
    key = _key(tier, ks[2])
    metadata = s3_client.head_object(Bucket=bucket, Key=key)["Metadata"]
    damaged = bytearray(array[2].tobytes())
    damaged[12345] ^= 0xFF
    s3_client.put_object(Bucket=bucket, Key=key, Body=bytes(damaged), Metadata=metadata)
    _load_fails_for(tier, array, ks, bad={2})
    assert not array[6].any()  # the damaged bytes were wiped, not handed to vLLM


def test_truncated_object_fails_and_its_row_is_zeroed(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    tier, array, ks = _stored(make_tier, 4, start=160)
    key = _key(tier, ks[1])
    s3_client.put_object(Bucket=bucket, Key=key, Body=array[1].tobytes()[:1000])
    _load_fails_for(tier, array, ks, bad={1})
    assert not array[5].any()  # every failed load leaves a zeroed row (issue 12, point 4)


def test_blocks_without_checksum_metadata_are_size_checked(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    # As vLLM's obj tier (or another client) writes them: no s3kv metadata at all.
    tier, array, ks = _stored(make_tier, 4, start=165)
    bodies = [array[0].tobytes(), b"", array[2].tobytes()[:4096], array[3].tobytes()]
    for k, body in zip(ks, bodies):
        s3_client.put_object(Bucket=bucket, Key=_key(tier, k), Body=body)
    _load_fails_for(tier, array, ks, bad={1, 2})  # empty and short: refused by size
    assert not array[5].any() and not array[6].any()


def test_wire_faults_on_the_awscrt_path(make_tier: Any, moto_server: str, bucket: str) -> None:
    from tests.faults.proxy import FaultProxy

    tier, array, ks = _stored(make_tier, 4, start=170, data_path="crt")
    names = [_key(tier, k).rsplit("/", 1)[-1] for k in ks]
    faults = {names[0]: "reset", names[2]: "503"}

    def rule(request: Any) -> str | None:  # loads only: lookups find every block
        return faults.get(request.path.rsplit("/", 1)[-1]) if h.is_load(request) else None

    with FaultProxy(moto_server, rule) as proxy:
        view, rows = h.primary_view()
        rows[:] = SENTINEL
        faulty = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/team/kv",
                           endpoint_url=proxy.url, data_path="crt")
        try:
            assert h.lookup(faulty, ks) == [LookupResult.HIT] * 4
            result = h.run(faulty, h.job(ks, range(4), load=True))
        finally:
            faulty.shutdown()
    assert not result.success
    assert set(result.successful_keys or ()) == {ks[1], ks[3]}
    for i in (1, 3):
        assert np.array_equal(rows[i], array[i])
    for i in (0, 2):
        assert set(np.unique(rows[i]).tolist()) <= {0, SENTINEL}
    assert {r.fault for r in proxy.injected()} == {"reset", "503"}
