"""Eviction by last use, done by the bucket's own lifecycle engine (Ceph RGW).

A Ceph RGW of its own, with lifecycle threads on and ``rgw lc debug interval`` set so
that one lifecycle "day" is :data:`DAY` seconds; the lifecycle rules are the ones
Terraform renders (``terraform/modules/documents``, committed as
``tests/data/lifecycle-rgw.json``: blocks expire one day after their last use). Chains
are stored and used through vLLM's real ``TieringOffloadingManager`` with s3kv's tier,
``renew_after`` 1 s: a hot chain used every second survives several expiry periods;
cold chains written at the same time are gone; no chain is left with its head deleted
and its tail present; manifests stay.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from vllm.v1.kv_offload.base import LookupResult

from tests.servers import rgw_keep
from tests.vllm import harness, managed

pytestmark = [pytest.mark.vllm, pytest.mark.rgw]

DAY = 5
"""Seconds of one lifecycle day. The hot chain is used about every second and renewed
once its Last-Modified is a second old, so its age stays under ~2.5 s (RGW counts in
whole seconds): well inside one day."""
RULES = Path(__file__).resolve().parents[1] / "data" / "lifecycle-rgw.json"
PREFIX = "team/kv"


@pytest.fixture(scope="module")
def lc_rgw(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An RGW whose lifecycle engine runs every DAY seconds (the suite's RGW runs none)."""
    from tests.servers.rgw import RGWServer

    server = RGWServer(extra_conf={"client.rgw.a": {
        "rgw_enable_lc_threads": "true",
        "rgw_lc_debug_interval": str(DAY),
    }})
    server.start()
    try:
        yield server
    finally:
        rgw_keep.finish(server, keep=request.session.testsfailed > 0)


def _client(server: Any) -> Any:
    return boto3.session.Session().client(
        "s3", endpoint_url=server.http_endpoint, aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"))


def _present(client: Any, bucket: str, keys: list[str]) -> list[bool]:
    listed: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=PREFIX):
        listed.update(o["Key"] for o in page.get("Contents", ()))
    return [k in listed for k in keys]


def test_a_hot_chain_outlives_expiry_and_cold_chains_die_whole(lc_rgw: Any) -> None:
    client = _client(lc_rgw)
    bucket = f"s3kv-lc-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    client.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration=json.loads(RULES.read_text()))
    entry = managed.s3_entry(f"s3://{bucket}/{PREFIX}", endpoint_url=lc_rgw.http_endpoint,
                             access_key_id=lc_rgw.access_key,
                             secret_access_key=lc_rgw.secret_key, renew_after=1.0)
    hot, cold = harness.keys(4, start=900), [harness.keys(4, start=s) for s in (910, 920)]
    with managed.manager_with(entry, chunks=16) as manager:
        tier = manager.secondary_tiers[0]
        mapper = tier.uploader.keys
        managed.store(manager, hot, seed=1, req="hot")
        for i, chain in enumerate(cold):
            managed.store(manager, chain, seed=2 + i, req=f"cold-{i}")
        chains = {"hot": hot, "cold-0": cold[0], "cold-1": cold[1]}
        objects = {name: [mapper.key_for(k) for k in ks] for name, ks in chains.items()}
        manifest = mapper.config_key()
        started = time.monotonic()
        seen_cold_gone = False
        # Three lifecycle days and more, using the hot chain about every second.
        while time.monotonic() - started < 3 * DAY + 1 or not seen_cold_gone:
            verdicts, loaded = managed.load(manager, hot, req=f"use-{time.monotonic()}")
            assert verdicts == [LookupResult.HIT] * 4, "the hot chain expired"
            assert loaded is not None
            if tier.renewer is not None:  # (None only when renewal is off)
                tier.renewer.flush(10)
            state = {name: _present(client, bucket, keys) for name, keys in objects.items()}
            assert all(state["hot"]), f"a hot block expired: {state['hot']}"
            seen_cold_gone = not any(state["cold-0"]) and not any(state["cold-1"])
            assert time.monotonic() - started < 6 * DAY, f"cold chains never expired: {state}"
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started) % 1.0))
        assert tier.renewer.renewed >= 4 * 2  # renewed again and again, a chain at a time
        assert tier.renewer.failed == 0
        # nothing is left half: the cold chains went whole, the hot one stayed whole
        final = {name: _present(client, bucket, keys) for name, keys in objects.items()}
        assert final == {"hot": [True] * 4, "cold-0": [False] * 4, "cold-1": [False] * 4}
        assert _present(client, bucket, [manifest]) == [True]  # manifests never expire
        tags = client.get_object_tagging(Bucket=bucket, Key=objects["hot"][0])["TagSet"]
        assert tags == [{"Key": "s3kv-object", "Value": "block"}]  # renewal kept the tag
