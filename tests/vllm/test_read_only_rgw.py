"""A consumer cluster with reader rights only, on Ceph RGW: the proof of ``read_only``.

The producer's tier writes as the bucket owner. The consumer's tier runs as a second
RGW user whose bucket policy grants what terraform/'s reader policy grants (ListBucket
held to the prefix, GetObject under it: GET, HEAD and List, nothing else).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from vllm.v1.kv_offload.base import LookupResult

from s3kv import ManifestMissingError
from tests.servers.rgw_users import RGWUser, create_user, grant_reader
from tests.vllm import harness, managed

pytestmark = [pytest.mark.vllm, pytest.mark.rgw]

PREFIX = "team/kv"
WRITES = {"PutObject", "DeleteObject", "DeleteObjects", "CreateMultipartUpload", "CopyObject"}


def _client(endpoint: str, access: str, secret: str) -> Any:
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
        region_name="us-east-1", config=Config(
            s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
            response_checksum_validation="when_required"))


@pytest.fixture
def shared(rgw: Any) -> Iterator[tuple[str, Any, RGWUser]]:
    """A bucket the owner writes and the reader user may only read under PREFIX."""
    owner = _client(rgw.http_endpoint, rgw.access_key, rgw.secret_key)
    bucket = f"s3kv-shared-{uuid.uuid4().hex[:10]}"
    owner.create_bucket(Bucket=bucket)
    reader = create_user(rgw, "s3kv-reader")
    grant_reader(owner, bucket, PREFIX, reader)
    yield bucket, owner, reader


def _entry(rgw: Any, url: str, access: str, secret: str, **options: Any) -> dict[str, Any]:
    return managed.s3_entry(url, endpoint_url=rgw.http_endpoint, access_key_id=access,
                            secret_access_key=secret, **options)


def test_the_reader_policy_really_bites(rgw: Any, shared: tuple[str, Any, RGWUser]) -> None:
    bucket, owner, reader = shared
    owner.put_object(Bucket=bucket, Key=f"{PREFIX}/probe", Body=b"x")
    as_reader = _client(rgw.http_endpoint, reader.access_key, reader.secret_key)
    assert as_reader.get_object(Bucket=bucket, Key=f"{PREFIX}/probe")["Body"].read() == b"x"
    as_reader.head_object(Bucket=bucket, Key=f"{PREFIX}/probe")
    assert as_reader.list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/")["KeyCount"] == 1
    for denied in (
        lambda: as_reader.put_object(Bucket=bucket, Key=f"{PREFIX}/new", Body=b"y"),
        lambda: as_reader.delete_object(Bucket=bucket, Key=f"{PREFIX}/probe"),
        lambda: as_reader.get_object(Bucket=bucket, Key="elsewhere"),
    ):
        with pytest.raises(ClientError) as info:
            denied()
        assert info.value.response["Error"]["Code"] == "AccessDenied"


def test_a_read_only_consumer_loads_the_producers_blocks(
    rgw: Any, shared: tuple[str, Any, RGWUser], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    bucket, _, reader = shared
    url = f"s3://{bucket}/{PREFIX}"
    keys = harness.keys(6, start=300)
    producer_entry = _entry(rgw, url, rgw.access_key, rgw.secret_key)
    with managed.manager_with(producer_entry) as producer:
        payload = managed.store(producer, keys, seed=11)

    trace = tmp_path / "consumer-trace.jsonl"
    trace.write_text("")
    monkeypatch.setenv("S3KV_TRACE_FILE", str(trace))
    caplog.set_level(logging.INFO)
    consumer_entry = _entry(rgw, url, reader.access_key, reader.secret_key, read_only=True)
    with managed.manager_with(consumer_entry) as consumer:
        # the consumer computes too: vLLM offers its blocks, the tier declines them
        managed.store(consumer, harness.keys(4, start=700), seed=12)
        verdicts, loaded = managed.load(consumer, keys)
        assert verdicts == [LookupResult.HIT] * 6
        assert loaded is not None and np.array_equal(loaded, payload)
        absent = harness.keys(2, start=7000)  # HEADs of missing keys: 404, not 403
        assert managed.load(consumer, absent, req="r2")[0] == [LookupResult.MISS] * 2
        stats = consumer.get_stats()
    requests = [json.loads(line) for line in trace.read_text().splitlines()]
    ops = [r["op"] for r in requests]
    assert set(ops) <= {"GetObject", "HeadObject"}, ops
    assert not set(ops) & WRITES
    # one look per key (this tier's presence cache starts empty; a GET of one byte, or a
    # HEAD), one GET per block loaded, and the manifest's GET at start (loads and lookups
    # never read it again)
    assert ops.count("HeadObject") + ops.count("GetObject") == 8 + 6 + 1
    expected = ("out-of-tree secondary tier", "mapped: buffers are still exported")
    problems = [f"{r.name}: {r.getMessage()}" for r in caplog.records
                if r.levelno >= logging.WARNING and r.name.startswith(("s3kv", "vllm.v1.kv"))
                and not any(e in r.getMessage() for e in expected)]
    assert problems == []
    assert any("is read-only" in r.getMessage() for r in caplog.records)
    data = stats.data["data"]
    assert data["vllm:kv_offload_s3kv_read_only_skipped_blocks"] == {("1:S3TierManager",): 4}
    # RGW answers 403 for the missing keys (ListBucket held to the prefix): lookups take
    # it as absent, the metrics show it
    requests_by = data["vllm:kv_offload_s3kv_requests"]
    assert requests_by[("1:S3TierManager", "head", "denied")] == 2
    assert requests_by[("1:S3TierManager", "head", "ok")] == 6


def test_a_read_only_consumer_without_a_manifest_fails_at_start(
    rgw: Any, shared: tuple[str, Any, RGWUser]
) -> None:
    bucket, _, reader = shared
    view, _ = harness.primary_view()
    with pytest.raises(ManifestMissingError, match="read-only s3kv tier 'S3TierManager': "
                       r"s3://.*/config\.json does not exist"):
        harness.s3_tier(view, harness.spec(), url=f"s3://{bucket}/{PREFIX}/nothing-here",
                        endpoint_url=rgw.http_endpoint, access_key_id=reader.access_key,
                        secret_access_key=reader.secret_key, read_only=True)


def test_a_reader_key_without_read_only_tries_one_store_a_minute(
    rgw: Any, shared: tuple[str, Any, RGWUser], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 40: a key that may only read, and no ``read_only``: the first store is
    denied, then stores pause (vLLM pins no row for them) and one block tries again a
    minute later."""
    bucket, _, reader = shared
    url = f"s3://{bucket}/{PREFIX}"
    with managed.manager_with(_entry(rgw, url, rgw.access_key, rgw.secret_key)) as producer:
        managed.store(producer, harness.keys(2, start=800), seed=13)  # and the manifest
    trace = tmp_path / "trace.jsonl"
    trace.write_text("")
    monkeypatch.setenv("S3KV_TRACE_FILE", str(trace))
    caplog.set_level(logging.INFO, logger="s3kv")

    def block_puts() -> int:
        ops = [json.loads(line) for line in trace.read_text().splitlines()]
        return sum(1 for r in ops if r["op"] == "PutObject" and r["key"].endswith(".bin"))

    entry = _entry(rgw, url, reader.access_key, reader.secret_key)  # read_only not set
    with managed.manager_with(entry) as consumer:
        tier = consumer.secondary_tiers[0]
        for i in range(5):  # five prompts computed within the minute
            managed.store(consumer, harness.keys(4, start=900 + 10 * i), seed=i, req=f"w{i}")
        assert block_puts() == 4  # the first job's blocks, each denied once
        real = tier.health.clock
        tier.health.clock = lambda: real() + 61  # a minute later
        managed.store(consumer, harness.keys(4, start=990), seed=9, req="later")
        assert block_puts() == 4 + 1  # one block tries again, and is denied
        managed.store(consumer, harness.keys(4, start=995), seed=10, req="later2")
        assert block_puts() == 4 + 1
        data = consumer.get_stats().data["data"]
    assert data["vllm:kv_offload_s3kv_stores_paused"] == {("1:S3TierManager",): 1}
    assert data["vllm:kv_offload_s3kv_dropped_store_blocks"] == {
        ("1:S3TierManager", "refused"): 4 * 5}
    paused = [r.getMessage() for r in caplog.records if "stores pause" in r.getMessage()]
    assert len(paused) == 1 and "read_only" in paused[0]
