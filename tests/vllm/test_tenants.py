"""Many tenants, one bucket, through vLLM's own factory and TieringOffloadingManager.

Two stores: moto's server behind :class:`CustomerKeys` (the proxy sees every request's
headers and refuses another key, as a store does: moto keeps none) and Ceph RGW 16 over
TLS, which encrypts for real. Each tenant sends the same prompt (the same OffloadKeys);
each stores under its own prefix with its own key; one never hits the other's blocks; a
load with the wrong key is a miss, and the blocks are then recomputed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError
from vllm.v1.kv_offload.base import LookupResult, ReqContext

from s3kv.tenant_keys import derive_key
from s3kv.vllm._tenants import REFUSALS_LOGGED
from tests.conftest import _s3_client
from tests.faults.proxy import CustomerKeys, FaultProxy
from tests.vllm import harness, managed

pytestmark = pytest.mark.vllm

PREFIX = "team/kv"
SECRET = b"the operator's secret: forty-eight bytes of it!!"
OTHER_SECRET = b"the secret after a rotation, also long enough..."
TIER = ("1:S3TierManager",)


def acme(**more: Any) -> dict[str, Any]:
    return {"s3kv_tenant": "acme", **more}


def globex(**more: Any) -> dict[str, Any]:
    return {"s3kv_tenant": "globex", **more}


@dataclass
class World:
    name: str
    bucket: str
    client: Any
    options: dict[str, Any]
    rule: CustomerKeys | None = None
    proxy: FaultProxy | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def entry(self, **options: Any) -> dict[str, Any]:
        return managed.s3_entry(f"s3://{self.bucket}/{PREFIX}", **self.options, **options)

    def keys(self) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", ()))


@pytest.fixture(params=["moto-server", "rgw-https"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    bucket = f"s3kv-tenants-{uuid.uuid4().hex[:10]}"
    if request.param == "moto-server":
        moto = request.getfixturevalue("moto_server")
        rule = CustomerKeys()
        with FaultProxy(moto, rule) as proxy:
            client = _s3_client(moto)
            client.create_bucket(Bucket=bucket)
            yield World("moto-server", bucket, client, {"endpoint_url": proxy.url}, rule, proxy)
        return
    rgw = request.getfixturevalue("rgw")
    client = _s3_client(rgw.https_endpoint, verify=rgw.ca_bundle,
                        credentials=(rgw.access_key, rgw.secret_key))
    client.create_bucket(Bucket=bucket)
    yield World("rgw-https", bucket, client, {
        "endpoint_url": rgw.https_endpoint, "ca_bundle": rgw.ca_bundle,
        "access_key_id": rgw.access_key, "secret_access_key": rgw.secret_key},
        extra={"rgw": rgw})


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "sse-c.secret"
    path.write_bytes(SECRET + b"\n")
    return path


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("")
    monkeypatch.setenv("S3KV_TRACE_FILE", str(path))
    return path


def _md5(secret: bytes, tenant: str) -> str:
    return base64.b64encode(hashlib.md5(derive_key(secret, tenant)).digest()).decode()


def test_two_tenants_one_prompt_each_under_its_own_prefix_and_key(
    world: World, secret: Path, trace: Path
) -> None:
    keys = harness.keys(4, start=900)
    with managed.manager_with(world.entry(sse_c_secret_file=str(secret))) as manager:
        payload_a = managed.store(manager, keys, seed=1, params=acme())
        verdicts, loaded = managed.load(manager, keys, req="b1", params=globex())
        assert verdicts == [LookupResult.MISS] * 4 and loaded is None  # never A's blocks
        payload_b = managed.store(manager, keys, seed=2, req="w2", params=globex())
        for params, payload in ((acme(), payload_a), (globex(), payload_b)):
            verdicts, loaded = managed.load(manager, keys, req=f"r-{params}", params=params)
            assert verdicts == [LookupResult.HIT] * 4
            assert loaded is not None and np.array_equal(loaded, payload)
        stats = manager.get_stats()
    listed = world.keys()
    mine = {t: sorted(k.removeprefix(f"{PREFIX}/tenants/{t}/") for k in listed
                      if k.startswith(f"{PREFIX}/tenants/{t}/")) for t in ("acme", "globex")}
    assert len(listed) == 2 * (4 + 1)  # each tenant: its 4 blocks and its manifest
    assert mine["acme"] == mine["globex"]  # vLLM's layout below each tenant's prefix
    # every request to a tenant's object carried that tenant's own key (both clients)
    requests = [json.loads(line) for line in trace.read_text().splitlines()]
    touching = [r for r in requests if r["op"] in ("PutObject", "GetObject")]
    assert {r["key"].split("/")[3] for r in touching} == {"acme", "globex"}
    for r in touching:
        assert r["sse_c_key_md5"] == _md5(SECRET, r["key"].split("/")[3]), r
    assert _md5(SECRET, "acme") != _md5(SECRET, "globex")
    if world.rule is not None:
        assert world.rule.refused == []
    else:  # at rest: Ceph serves no byte of A's without A's key
        block = next(k for k in listed if "/acme/" in k and k.endswith(".bin"))
        for sse in ({}, {"SSECustomerAlgorithm": "AES256",
                         "SSECustomerKey": derive_key(SECRET, "globex")}):
            with pytest.raises(ClientError, match=r"InvalidArgument"):
                world.client.get_object(Bucket=world.bucket, Key=block, **sse)
    blocks = stats.data["data"]["vllm:kv_offload_s3kv_tenant_blocks"]
    assert blocks[(*TIER, "acme", "store", "done")] == 4
    assert blocks[(*TIER, "globex", "load", "done")] == 4


def test_a_load_with_the_wrong_key_is_a_miss_then_recomputed(
    world: World, secret: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keys = harness.keys(3, start=950)
    with managed.manager_with(world.entry(sse_c_secret_file=str(secret))) as manager:
        payload = managed.store(manager, keys, seed=5, params=acme())
    before = {o["Key"]: o["ETag"] for o in world.client.list_objects_v2(
        Bucket=world.bucket)["Contents"]}
    rotated = tmp_path / "rotated.secret"
    rotated.write_bytes(OTHER_SECRET)
    caplog.set_level(logging.WARNING)
    with managed.manager_with(world.entry(sse_c_secret_file=str(rotated))) as manager:
        verdicts, loaded = managed.load(manager, keys, params=acme())
        assert verdicts == [LookupResult.MISS] * 3 and loaded is None
        managed.store(manager, keys, seed=6, req="again", params=acme())  # the recompute
    assert any("tenant acme is not offloaded" in r.getMessage() and "customer key (SSE-C)"
               in r.getMessage() for r in caplog.records)
    after = {o["Key"]: o["ETag"] for o in world.client.list_objects_v2(
        Bucket=world.bucket)["Contents"]}
    assert after == before  # nothing overwritten with the wrong key
    # a load job sent anyway (a stale HIT) fails: rows get no byte of A's
    view, rows = harness.primary_view(chunks=3)
    rows[:] = 7
    tier = harness.s3_tier(view, harness.spec(chunks=3), url=f"s3://{world.bucket}/{PREFIX}",
                           sse_c_secret_file=str(rotated), **world.options)
    try:
        job = harness.job(keys, [0, 1, 2], load=True)
        job.req_context.kv_transfer_params = acme()
        result = harness.run(tier, job)
    finally:
        tier.shutdown()
    assert result.success is False
    assert not any(np.array_equal(rows[i], payload[i]) for i in range(3))


HOSTILE = ["../", "..", "%2e%2e", "a" * 64, "a" * 10_000, "\u0430cme", "Acme", "acme/../x",
           "acme\x00", 7, ["acme"]]


def test_hostile_tenant_ids_are_refused_and_nothing_is_written(
    moto_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = f"s3kv-hostile-{uuid.uuid4().hex[:10]}"
    client = _s3_client(moto_server)
    client.create_bucket(Bucket=bucket)
    caplog.set_level(logging.WARNING)
    entry = managed.s3_entry(f"s3://{bucket}/{PREFIX}", endpoint_url=moto_server,
                             default_tenant="public")
    keys = harness.keys(2, start=990)
    with managed.manager_with(entry) as manager:
        for i, value in enumerate(HOSTILE):
            params = {"s3kv_tenant": value}
            managed.store(manager, keys, seed=i, req=f"w{i}", params=params)
            verdicts, loaded = managed.load(manager, keys, req=f"r{i}", params=params)
            assert verdicts == [LookupResult.MISS] * 2 and loaded is None
        managed.store(manager, keys, seed=99, req="plain")  # no field: the default tenant
        stats = manager.get_stats()
    listed = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"])
    assert listed and all(k.startswith(f"{PREFIX}/tenants/public/") for k in listed), listed
    refusals = [r.getMessage() for r in caplog.records
                if "is not offloaded: kv_transfer_params" in r.getMessage()]
    # each request is read once (its lookup, then its store); the first 20 are logged
    assert len(refusals) == REFUSALS_LOGGED < len(HOSTILE) * 2
    assert refusals[-1].endswith("(later refusals: metrics only)")
    assert all("a tenant id is 1-63 characters of a-z, 0-9" in m and len(m) < 400
               for m in refusals)
    not_offloaded = stats.data["data"]["vllm:kv_offload_s3kv_requests_not_offloaded"]
    assert not_offloaded[(*TIER, "invalid_tenant")] == len(HOSTILE) * 2


def test_requests_naming_no_tenant_are_not_offloaded_once_keys_are_asked_for(
    moto_server: str, secret: Path
) -> None:
    bucket = f"s3kv-untenanted-{uuid.uuid4().hex[:10]}"
    client = _s3_client(moto_server)
    client.create_bucket(Bucket=bucket)
    entry = managed.s3_entry(f"s3://{bucket}/{PREFIX}", endpoint_url=moto_server,
                             sse_c_secret_file=str(secret))
    keys = harness.keys(2, start=995)
    with managed.manager_with(entry) as manager:
        managed.store(manager, keys, seed=1)  # no s3kv_tenant: nothing stored in the clear
        assert client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
        managed.store(manager, harness.keys(2, start=997), seed=1, req="named", params=acme())
    assert all(o["Key"].startswith(f"{PREFIX}/tenants/acme/")
               for o in client.list_objects_v2(Bucket=bucket)["Contents"])


def test_one_tenants_hit_is_never_anothers_answer(make_tier: Any, bucket: str) -> None:
    """vLLM's lookup manager keeps verdicts by OffloadKey alone: while A's request still
    holds a HIT for a key, B's lookup of the same key is B's own (a MISS)."""
    view, rows = harness.primary_view(chunks=4)
    tier = make_tier(view, harness.spec(chunks=4))
    keys = harness.keys(4, start=1000)
    harness.fill(rows, range(4), seed=3)
    store = harness.job(keys, [0, 1, 2, 3], load=False)
    store.req_context.kv_transfer_params = acme()
    assert harness.run(tier, store).success
    a, b = ReqContext(req_id="a", kv_transfer_params=acme()), ReqContext(
        req_id="b", kv_transfer_params=globex())
    assert _settle(tier, keys, a) == [LookupResult.HIT] * 4  # A's request stays open
    assert _settle(tier, keys, b) == [LookupResult.MISS] * 4


def _settle(tier: Any, keys: list[bytes], ctx: ReqContext) -> list[LookupResult]:
    """Look up until no key answers RETRY, stepping like the scheduler, the request kept."""
    for _ in range(2000):
        answers = [tier.lookup(k, ctx) for k in keys]
        if LookupResult.RETRY not in answers:
            return answers
        tier.on_schedule_end(harness.END)
        time.sleep(0.005)
    raise TimeoutError("lookups still RETRY")


@pytest.mark.rgw
def test_a_tenants_credentials_reach_only_its_prefix(rgw: Any, secret: Path) -> None:
    """Each tenant's engine holds its own RGW user, granted only its tenant's prefix (the
    grants terraform/modules/aws-tenant gives a tenant's role): B cannot read A's
    objects, even with A's key, and B's engine claiming to be A misses and writes nothing."""
    from tests.servers.rgw_users import create_user, grant_tenants

    endpoint, ca = rgw.https_endpoint, rgw.ca_bundle
    owner = _s3_client(endpoint, verify=ca, credentials=(rgw.access_key, rgw.secret_key))
    bucket = f"s3kv-tenant-iam-{uuid.uuid4().hex[:8]}"
    owner.create_bucket(Bucket=bucket)
    users = {t: create_user(rgw, f"s3kv-tenant-{t}") for t in ("acme", "globex")}
    grant_tenants(owner, bucket, PREFIX, users)

    def entry(tenant: str, **options: Any) -> dict[str, Any]:
        user = users[tenant]
        return managed.s3_entry(
            f"s3://{bucket}/{PREFIX}", endpoint_url=endpoint, ca_bundle=ca,
            access_key_id=user.access_key, secret_access_key=user.secret_key,
            sse_c_secret_file=str(secret), **options)

    keys = harness.keys(3, start=1100)
    with managed.manager_with(entry("acme", default_tenant="acme")) as manager:
        managed.store(manager, keys, seed=1, params=acme())
    stored = {o["Key"]: o["ETag"] for o in owner.list_objects_v2(Bucket=bucket)["Contents"]}
    assert stored and all(k.startswith(f"{PREFIX}/tenants/acme/") for k in stored)

    as_b = _s3_client(endpoint, verify=ca, credentials=(users["globex"].access_key,
                                                         users["globex"].secret_key))
    a_key = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": derive_key(SECRET, "acme")}
    for denied in (
        lambda: as_b.get_object(Bucket=bucket, Key=next(iter(stored)), **a_key),
        lambda: as_b.list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/tenants/acme/"),
        lambda: as_b.put_object(Bucket=bucket, Key=f"{PREFIX}/tenants/acme/x", Body=b"y"),
    ):
        with pytest.raises(ClientError) as info:
            denied()
        assert info.value.response["Error"]["Code"] == "AccessDenied"

    with managed.manager_with(entry("globex")) as manager:
        verdicts, loaded = managed.load(manager, keys, params=acme())  # B claims to be A
        assert verdicts == [LookupResult.MISS] * 3 and loaded is None
        managed.store(manager, harness.keys(2, start=1200), seed=2, req="w2", params=acme())
        managed.store(manager, keys, seed=3, req="w3", params=globex())  # its own: fine
    after = {o["Key"]: o["ETag"] for o in owner.list_objects_v2(Bucket=bucket)["Contents"]}
    assert {k: e for k, e in after.items() if "/tenants/acme/" in k} == stored
    assert sum("/tenants/globex/" in k for k in after) == 3 + 1


def test_tenant_labels_are_bounded() -> None:
    """The first ``limit`` tenants keep a label of their own; later ones count as other."""
    from s3kv.report import TransferReport
    from s3kv.vllm._metrics import TierMeter
    from s3kv.vllm._tenant_metrics import TENANT_BLOCKS, TENANT_LABELS, TenantMeter

    meter = TierMeter("1:S3TierManager")
    tenants = TenantMeter(meter, limit=2)
    report = TransferReport(operation="upload", done=(b"k" * 8,), bytes=10)
    for tenant in ("a", "b", "c", "d", "a"):
        tenants.on_job(tenant, is_load=False, report=report)
    tenants.on_job(None, is_load=False, report=report)  # no tenant: not counted here
    stats = meter.take_stats()
    assert stats is not None
    blocks = stats.data["data"][TENANT_BLOCKS]
    assert blocks == {(*TIER, "a", "store", "done"): 2, (*TIER, "b", "store", "done"): 1,
                      (*TIER, "other", "store", "done"): 2}
    assert TENANT_LABELS == 16
