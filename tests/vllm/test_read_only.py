"""Read-only tiers (``read_only: true``): no write request, stores skipped, loads work.

On moto's server; the same with a Ceph RGW user holding only reader rights is
``test_read_only_rgw.py``. Requests are counted from ``S3KV_TRACE_FILE``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult

from s3kv import ManifestMismatchError, ManifestMissingError
from tests.vllm import harness, managed

pytestmark = pytest.mark.vllm

WRITES = {"PutObject", "DeleteObject", "DeleteObjects", "CreateMultipartUpload", "CopyObject"}


@pytest.fixture
def trace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[], list[dict[str, Any]]]:
    """From now on, s3kv's requests go to a fresh trace file; returns its reader."""
    path = tmp_path / "trace.jsonl"
    path.write_text("")
    monkeypatch.setenv("S3KV_TRACE_FILE", str(path))
    return lambda: [json.loads(line) for line in path.read_text().splitlines()]


def _s3kv_problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("s3kv") and r.levelno >= logging.WARNING]


def test_no_manifest_fails_at_start_without_writing(
    make_tier: Any, trace: Callable[[], list[dict[str, Any]]]
) -> None:
    view, _ = harness.primary_view()
    with pytest.raises(ManifestMissingError) as info:
        make_tier(view, harness.spec(), read_only=True)
    message = str(info.value)
    assert "read-only s3kv tier 'S3TierManager'" in message
    assert "config.json does not exist" in message
    assert [r["op"] for r in trace()] == ["GetObject"]  # the manifest read, nothing else


def test_a_manifest_of_other_fields_fails_at_start(
    make_tier: Any, s3_client: Any, bucket: str
) -> None:
    view, _ = harness.primary_view()
    writer = make_tier(view, harness.spec())
    key = writer.uploader.keys.config_key()
    other = json.loads(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())
    other["tokens_per_hash"] = 32
    s3_client.put_object(Bucket=bucket, Key=key, Body=json.dumps(other).encode())
    with pytest.raises(ManifestMismatchError, match="read-only s3kv tier 'S3TierManager'"):
        make_tier(view, harness.spec(), read_only=True)


def test_a_reader_loads_what_a_writer_stored_and_never_writes(
    moto_server: str, bucket: str, trace: Callable[[], list[dict[str, Any]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"s3://{bucket}/team/kv"
    keys = harness.keys(4, start=100)
    with managed.manager_with(managed.s3_entry(url, endpoint_url=moto_server)) as producer:
        payload = managed.store(producer, keys, seed=7)
    assert any(r["op"] == "PutObject" for r in trace())

    caplog.set_level(logging.INFO, logger="s3kv")
    reader_entry = managed.s3_entry(url, endpoint_url=moto_server, read_only=True)
    with managed.manager_with(reader_entry) as consumer:
        requests_before = len(trace())
        tier = consumer.secondary_tiers[0]
        fresh = harness.keys(3, start=500)
        managed.store(consumer, fresh, seed=8)  # vLLM skips the tier: no job at all
        assert len(trace()) == requests_before
        assert tier.get_finished_jobs() == []
        verdicts, loaded = managed.load(consumer, keys)
        assert verdicts == [LookupResult.HIT] * 4
        assert loaded is not None and np.array_equal(loaded, payload)
        # what the consumer "stored" is not claimed present: it was never written
        assert managed.load(consumer, fresh, req="r2")[0] == [LookupResult.MISS] * 3
        stats = consumer.get_stats()
    ops = {r["op"] for r in trace()[requests_before:]}
    assert ops <= {"GetObject", "HeadObject"} and not ops & WRITES
    assert not {r["op"] for r in trace()} - {"GetObject", "HeadObject", "PutObject"}
    assert _s3kv_problems(caplog) == []
    started = [r.getMessage() for r in caplog.records if "is read-only" in r.getMessage()]
    assert len(started) == 1 and "stores skipped" in started[0]
    skipped = stats.data["data"]["vllm:kv_offload_s3kv_read_only_skipped_blocks"]
    assert skipped == {("1:S3TierManager",): 3}
    # vLLM counts these neither as back-pressure drops nor as failed stores
    assert "vllm:kv_offload_tiering_backpressure_stores_dropped" not in stats.data["data"]
    assert not any("failures" in name for name in stats.data["data"])


def test_a_store_job_that_arrives_anyway_is_answered_without_io(
    make_tier: Any, trace: Callable[[], list[dict[str, Any]]], caplog: pytest.LogCaptureFixture
) -> None:
    view, array = harness.primary_view()
    writer = make_tier(view, harness.spec())
    reader = make_tier(view, harness.spec(), read_only=True)
    assert not reader.bp_detector.should_store(4)
    harness.fill(array, range(2), seed=3)
    before = len(trace())
    ks = harness.keys(2, start=900)
    store = harness.job(ks, [0, 1], load=False)
    reader.submit_store(store)
    (result,) = reader.get_finished_jobs()
    assert (result.job_id, result.success, result.successful_keys) == (store.job_id, False, None)
    assert (result.transfer_time, result.transfer_bytes) == (0.0, 0)
    assert reader.get_finished_jobs() == []
    assert len(trace()) == before
    assert harness.lookup(reader, ks) == [LookupResult.MISS] * 2
    assert writer.get_finished_jobs() == []
    assert _s3kv_problems(caplog) == []
