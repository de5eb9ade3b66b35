"""Eviction by last use with ``s3kv gc`` (vLLM's real classes, moto's server and RGW).

Chains are stored and used through vLLM's ``TieringOffloadingManager`` with s3kv's tier
(``renew_after`` 1 s), then collected with :func:`s3kv.ops.gc.collect.gc`:

* ``--older-than``: a hot chain used throughout survives; cold chains written at the
  same time go, whole; a chain kept alive by ``touch`` alone survives too;
* ``--max-bytes``: the deleted set is exactly the least recently used one, computed here
  from the order the chains were used in; on RGW, which lists milliseconds, a budget
  that cuts through a renewed chain takes its tail and keeps its head;
* ``--max-bytes`` on a fresh 16-block chain (one store job: its blocks share a second on
  moto and land in any order on RGW), three budgets: a prefix of the chain stays (the
  tier wrote each block's parent; gc reads them near its cutoff);
* a chain loaded (so renewed) after gc listed it survives, and the cold chain goes in
  its place: the LRU order holds through the race.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from vllm.v1.kv_offload.base import LookupResult, ReqContext

from s3kv import S3Settings
from s3kv.ops.gc.collect import gc
from tests.vllm import harness, managed

pytestmark = pytest.mark.vllm

PREFIX = "team/kv"
RENEW_AFTER = 1.0
BLOCK = harness.ROW_BYTES


class Endpoint:
    def __init__(self, name: str, url: str, access: str, secret: str) -> None:
        self.name, self.url, self.access, self.secret = name, url, access, secret
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=url, aws_access_key_id=access, aws_secret_access_key=secret,
            region_name="us-east-1", config=Config(
                s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                response_checksum_validation="when_required"))

    def settings(self) -> S3Settings:
        return S3Settings.resolve(endpoint_url=self.url, access_key_id=self.access,
                                  secret_access_key=self.secret, max_attempts=2)

    def entry(self, bucket: str) -> dict[str, Any]:
        return managed.s3_entry(f"s3://{bucket}/{PREFIX}", endpoint_url=self.url,
                                access_key_id=self.access, secret_access_key=self.secret,
                                renew_after=RENEW_AFTER)


@pytest.fixture(params=["moto-server", "rgw"])
def endpoint(request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    if request.param == "rgw":
        rgw = request.getfixturevalue("rgw")
        yield Endpoint("rgw", rgw.http_endpoint, rgw.access_key, rgw.secret_key)
    else:
        yield Endpoint("moto", request.getfixturevalue("moto_server"), "testing", "testing")


@pytest.fixture
def bucket(endpoint: Endpoint) -> str:
    name = f"s3kv-evict-{uuid.uuid4().hex[:10]}"
    endpoint.client.create_bucket(Bucket=name)
    return name


def _present(endpoint: Endpoint, bucket: str, keys: list[str]) -> list[bool]:
    listed = {o["Key"] for o in endpoint.client.list_objects_v2(
        Bucket=bucket, Prefix=PREFIX).get("Contents", ())}
    return [k in listed for k in keys]


def _use(manager: Any, chain: list[bytes]) -> None:
    verdicts, loaded = managed.load(manager, chain, req=f"use-{uuid.uuid4().hex[:6]}")
    assert verdicts == [LookupResult.HIT] * len(chain) and loaded is not None
    assert manager.secondary_tiers[0].renewer.flush(10)


def _touch(tier: Any, chain: list[bytes]) -> None:
    ctx = ReqContext(req_id=f"touch-{uuid.uuid4().hex[:6]}")
    for i, k in enumerate(chain):
        ctx.set_offload_key_position(k, 16 * (i + 1))
    tier.touch(chain, ctx)
    assert tier.renewer.flush(10)


def test_older_than_keeps_what_is_used_and_takes_cold_chains_whole(
    endpoint: Endpoint, bucket: str
) -> None:
    hot, touched = harness.keys(4, start=1000), harness.keys(4, start=1010)
    cold = [harness.keys(4, start=s) for s in (1020, 1030)]
    with managed.manager_with(endpoint.entry(bucket), chunks=24) as manager:
        tier = manager.secondary_tiers[0]
        for i, chain in enumerate([hot, touched, *cold]):
            managed.store(manager, chain, seed=i, req=f"w{i}")
        names = {"hot": hot, "touched": touched, "cold-0": cold[0], "cold-1": cold[1]}
        objects = {n: [tier.uploader.keys.key_for(k) for k in ks] for n, ks in names.items()}
        _touch(tier, touched)  # fresh: nothing to renew yet, only HEADs
        for _ in range(3):  # three thresholds: the hot chain loaded, the other touched
            time.sleep(RENEW_AFTER + 0.1)
            _use(manager, hot)
            _touch(tier, touched)
        report = gc(f"s3://{bucket}/{PREFIX}", older_than=2 * RENEW_AFTER + 1.1,
                    settings=endpoint.settings())
    state = {n: _present(endpoint, bucket, keys) for n, keys in objects.items()}
    assert state == {"hot": [True] * 4, "touched": [True] * 4,
                     "cold-0": [False] * 4, "cold-1": [False] * 4}
    assert (report.blocks_deleted, report.blocks_kept) == (8, 8)


def test_max_bytes_deletes_exactly_the_least_recently_used(
    endpoint: Endpoint, bucket: str
) -> None:
    chains = {name: harness.keys(4, start=1100 + 10 * i) for i, name in enumerate("ABCD")}
    with managed.manager_with(endpoint.entry(bucket), chunks=24) as manager:
        tier = manager.secondary_tiers[0]
        for name, chain in chains.items():
            managed.store(manager, chain, seed=ord(name), req=name)
        order = ["B", "D"]  # never used again: least recently used, written together
        time.sleep(RENEW_AFTER + 0.1)
        _use(manager, chains["C"])
        order.append("C")
        time.sleep(RENEW_AFTER + 0.1)  # a second later (moto and AWS list whole seconds)
        _use(manager, chains["A"])
        order.append("A")
        objects = {n: [tier.uploader.keys.key_for(k) for k in ks] for n, ks in chains.items()}
    # Keep the two most recently used chains: exactly B and D go.
    report = gc(f"s3://{bucket}/{PREFIX}", max_bytes=8 * BLOCK, settings=endpoint.settings())
    expected_gone = {k for n in order[:2] for k in objects[n]}
    remaining = {k for n in objects for k in objects[n]
                 if _present(endpoint, bucket, [k])[0]}
    assert {k for n in objects for k in objects[n]} - remaining == expected_gone
    assert (report.blocks_deleted, report.bytes_freed) == (8, 8 * BLOCK)
    assert report.bytes_kept == 8 * BLOCK
    if endpoint.name == "rgw":
        # RGW lists milliseconds and C was renewed tail first: a budget that cuts
        # through C takes its last two blocks and keeps its head.
        report = gc(f"s3://{bucket}/{PREFIX}", max_bytes=6 * BLOCK,
                    settings=endpoint.settings())
        assert report.blocks_deleted == 2
        assert _present(endpoint, bucket, objects["C"]) == [True, True, False, False]
        assert all(_present(endpoint, bucket, objects["A"]))


@pytest.mark.parametrize("keep", [5, 11, 8])
def test_max_bytes_keeps_a_prefix_of_a_fresh_chain(
    endpoint: Endpoint, bucket: str, keep: int
) -> None:
    chain = harness.keys(16, start=1200 + 20 * keep)
    with managed.manager_with(endpoint.entry(bucket), chunks=24) as manager:
        tier = manager.secondary_tiers[0]
        managed.store(manager, chain, seed=keep, req=f"fresh-{keep}")
        objects = [tier.uploader.keys.key_for(k) for k in chain]
    report = gc(f"s3://{bucket}/{PREFIX}", max_bytes=keep * BLOCK, settings=endpoint.settings())
    assert _present(endpoint, bucket, objects) == [True] * keep + [False] * (16 - keep)
    assert (report.blocks_deleted, report.blocks_kept) == (16 - keep, keep)


def test_a_chain_loaded_after_gc_listed_it_survives_and_the_cold_one_goes(
    endpoint: Endpoint, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import s3kv.ops.gc.collect as gc_module

    hot, cold = harness.keys(4, start=1400), harness.keys(4, start=1410)
    with managed.manager_with(endpoint.entry(bucket), chunks=24) as manager:
        tier = manager.secondary_tiers[0]
        managed.store(manager, hot, seed=1, req="hot")  # older on paper: LRU's first pick
        time.sleep(1.1)
        managed.store(manager, cold, seed=2, req="cold")
        objects = {n: [tier.uploader.keys.key_for(k) for k in ks]
                   for n, ks in (("hot", hot), ("cold", cold))}
        time.sleep(RENEW_AFTER + 1.1)  # both due for renewal
        lock, used = threading.Lock(), []

        def load_hot(*args: Any) -> None:  # gc looks again from several threads
            with lock:
                if not used:
                    _use(manager, hot)  # a request hits the hot chain: renewed
                    used.append(True)

        real_open = gc_module.open_store

        def open_store(loc: Any, settings: Any) -> Any:
            from tests.functional.test_gc_races import Hooked

            return Hooked(real_open(loc, settings), {"head": load_hot}, {})

        monkeypatch.setattr(gc_module, "open_store", open_store)
        report = gc(f"s3://{bucket}/{PREFIX}", max_bytes=4 * BLOCK, settings=endpoint.settings())
    assert used
    assert _present(endpoint, bucket, objects["hot"]) == [True] * 4
    assert _present(endpoint, bucket, objects["cold"]) == [False] * 4
    assert report.used_since_listed >= 1 and report.blocks_deleted == 4
