"""Interop with vLLM's own object-store tier (``ObjectStoreSecondaryTierManager``, NIXL).

Both tiers are vLLM's real classes, built through vLLM's ``SecondaryTierFactory``, on
moto's S3 server and on Ceph RGW 16 (``S3KV_TEST_BACKENDS`` narrows them): blocks one
tier stores, the other finds and loads byte for byte; and through the CLI, the obj
tier's cache pulled into a directory is found by vLLM's ``fs`` tier, and an ``fs``-tier
cache pushed to S3 is found by the obj tier. The obj tier writes no manifest and no
checksums, so ``s3kv pull`` needs ``--allow-missing-manifest`` for its caches.

Without NIXL (``make vllm-venv`` installs it) these tests skip locally and fail in CI.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult

from tests.conftest import BACKENDS
from tests.vllm import harness as h

pytestmark = pytest.mark.vllm

NIXL_MISSING = [m for m in ("nixl", "nixl_cu12") if importlib.util.find_spec(m) is None]
SERVERS = [b for b in ("moto-server", "rgw-http") if b in BACKENDS]


@pytest.fixture(autouse=True)
def _needs_nixl() -> None:
    if not NIXL_MISSING:
        return
    message = (
        f"NIXL is not installed ({', '.join(NIXL_MISSING)} missing), so vLLM's obj tier "
        "cannot run; `make vllm-venv` installs nixl-cu12==1.5.1 and nixl==1.5.1"
    )
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)  # CI builds the venv: a missing NIXL is a bug
    pytest.skip(message)


@dataclass
class Peer:
    """One S3 server, a fresh bucket on it, and both tiers' ways to reach it."""

    name: str
    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    client: Any

    def obj_tier(self, view: memoryview, spec: Any, prefix: str) -> Any:
        return h.obj_tier(view, spec, endpoint=self.endpoint, bucket=self.bucket,
                          prefix=prefix, access_key=self.access_key,
                          secret_key=self.secret_key, rgw="rgw" in self.name)

    def s3kv_tier(self, view: memoryview, spec: Any, prefix: str) -> Any:
        url = f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"
        return h.s3_tier(view, spec, url=url, endpoint_url=self.endpoint,
                         access_key_id=self.access_key, secret_access_key=self.secret_key)

    def cli(self, *args: str) -> dict[str, Any]:
        env = {**os.environ, "S3KV_ACCESS_KEY_ID": self.access_key,
               "S3KV_SECRET_ACCESS_KEY": self.secret_key}
        proc = subprocess.run(
            [sys.executable, "-m", "s3kv.cli", *args, "--endpoint-url", self.endpoint, "--json"],
            capture_output=True, text=True, timeout=120, env=env,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return dict(json.loads(proc.stdout))

    def listing(self) -> list[str]:
        listed = self.client.list_objects_v2(Bucket=self.bucket).get("Contents", [])
        return sorted(o["Key"] for o in listed)


@pytest.fixture(params=SERVERS)
def peer(request: pytest.FixtureRequest) -> Peer:
    import boto3
    from botocore.config import Config

    if request.param == "moto-server":
        endpoint = request.getfixturevalue("moto_server")
        access_key = secret_key = "testing"
    else:
        rgw = request.getfixturevalue("rgw")
        endpoint, access_key, secret_key = rgw.http_endpoint, rgw.access_key, rgw.secret_key
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access_key,
        aws_secret_access_key=secret_key, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"},
                      request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"),
    )
    bucket = f"s3kv-obj-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return Peer(request.param, endpoint, bucket, access_key, secret_key, client)


@contextlib.contextmanager
def running(tier: Any) -> Iterator[Any]:
    try:
        yield tier
    finally:
        tier.shutdown()


def _stored_by(tier: Any, array: np.ndarray, ks: list[bytes], seed: int) -> None:
    h.fill(array, range(len(ks)), seed=seed)
    assert h.run(tier, h.job(ks, range(len(ks)), load=False)).success


def _found_and_loaded_by(tier: Any, array: np.ndarray, ks: list[bytes]) -> None:
    n = len(ks)
    array[n : 2 * n] = 0
    assert h.lookup(tier, ks) == [LookupResult.HIT] * n
    assert h.run(tier, h.job(ks, range(n, 2 * n), load=True)).success
    assert np.array_equal(array[n : 2 * n], array[0:n])  # byte for byte
    h.finish(tier)


ROW_SIZES = [h.ROW_BYTES, 2 * 1024 * 1024]
"""Blocks of 64 KiB and 2 MiB: one request each, and the large ones read as ranged parts
when a job is small, meet the real obj tier both ways."""


def _keys(seed: int) -> list[bytes]:
    return h.keys(3, start=seed) + h.keys(1, start=seed + 3, group=1)


@pytest.mark.parametrize("prefix", ["team/kv", ""], ids=["prefix", "no-prefix"])
@pytest.mark.parametrize("row_bytes", ROW_SIZES, ids=["64KiB", "2MiB"])
def test_obj_tier_stores_s3kv_tier_loads(peer: Peer, prefix: str, row_bytes: int) -> None:
    spec = h.spec(row_bytes=row_bytes)
    view, array = h.primary_view(row_bytes=row_bytes)
    ks = _keys(300)
    with running(peer.obj_tier(view, spec, prefix)) as obj:
        _stored_by(obj, array, ks, seed=300)
    with running(peer.s3kv_tier(view, spec, prefix)) as tier:
        # the same objects, not copies: the obj tier's keys are s3kv's keys
        assert {tier.uploader.keys.key_for(k) for k in ks} <= set(peer.listing())
        _found_and_loaded_by(tier, array, ks)


@pytest.mark.parametrize("prefix", ["team/kv", ""], ids=["prefix", "no-prefix"])
@pytest.mark.parametrize("row_bytes", ROW_SIZES, ids=["64KiB", "2MiB"])
def test_s3kv_tier_stores_obj_tier_loads(peer: Peer, prefix: str, row_bytes: int) -> None:
    spec = h.spec(row_bytes=row_bytes)
    view, array = h.primary_view(row_bytes=row_bytes)
    ks = _keys(310)
    with running(peer.s3kv_tier(view, spec, prefix)) as tier:
        _stored_by(tier, array, ks, seed=310)
    with running(peer.obj_tier(view, spec, prefix)) as obj:
        _found_and_loaded_by(obj, array, ks)


def test_obj_tier_cache_pulled_is_found_by_the_fs_tier(peer: Peer, tmp_path: Path) -> None:
    spec = h.spec()
    view, array = h.primary_view()
    ks = _keys(320)
    with running(peer.obj_tier(view, spec, "team/kv")) as obj:
        _stored_by(obj, array, ks, seed=320)
    assert not any(k.endswith("config.json") for k in peer.listing())  # the obj tier writes none

    summary = peer.cli("pull", f"s3://{peer.bucket}/team/kv", str(tmp_path),
                       "--allow-missing-manifest")
    assert len(list(tmp_path.rglob("*.bin"))) == len(ks), summary
    with running(h.fs_tier(view, spec, str(tmp_path))) as fs:
        _found_and_loaded_by(fs, array, ks)


def test_fs_tier_cache_pushed_is_found_by_the_obj_tier(peer: Peer, tmp_path: Path) -> None:
    spec = h.spec()
    view, array = h.primary_view()
    ks = _keys(330)
    with running(h.fs_tier(view, spec, str(tmp_path))) as fs:
        _stored_by(fs, array, ks, seed=330)
    summary = peer.cli("push", str(tmp_path), f"s3://{peer.bucket}/team/kv")
    assert sum(k.endswith(".bin") for k in peer.listing()) == len(ks), summary
    with running(peer.obj_tier(view, spec, "team/kv")) as obj:
        _found_and_loaded_by(obj, array, ks)


def test_obj_tier_loads_nothing_of_another_prefix(peer: Peer) -> None:
    # The negative control: a miss is a miss (the HITs above are not vacuous).
    spec = h.spec()
    view, array = h.primary_view()
    ks = _keys(340)
    with running(peer.s3kv_tier(view, spec, "team/kv")) as tier:
        _stored_by(tier, array, ks, seed=340)
    with running(peer.obj_tier(view, spec, "other")) as obj:
        assert h.lookup(obj, ks) == [LookupResult.MISS] * len(ks)
