"""Tier metrics through vLLM's own path: TieringOffloadingManager.get_stats (which
aggregates TieringMetricsTracker's and each tier's OffloadingConnectorStats), then the
OffloadingConnector's Prometheus metrics (OffloadPromMetrics) and a text scrape."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadPromMetrics
from vllm.v1.kv_offload.base import LookupResult

from s3kv import Namespace, Uploader
from s3kv.errors import ObjectNotFoundError, SizeMismatchError, TransientStoreError
from s3kv.stores import LocalStore, PutOptions
from s3kv.stores.base import ObjectInfo, RequestEvent
from s3kv.stores.hooks import reported
from s3kv.vllm._metrics import TierMeter
from tests.conftest import ARTIFACTS
from tests.vllm import harness, managed

pytestmark = pytest.mark.vllm

TIER = "1:S3TierManager"
SCRAPE = ARTIFACTS / "vllm-tier-metrics-scrape.txt"


def _prometheus(extra_config: dict[str, Any]) -> tuple[OffloadPromMetrics, CollectorRegistry]:
    """vLLM's OffloadingConnector Prometheus metrics, on a registry of our own."""
    registry = CollectorRegistry()

    def bound(cls: type) -> type:
        return type(cls.__name__, (cls,), {"__init__": lambda self, *a, **kw: cls.__init__(
            self, *a, registry=registry, **kw)})

    config = SimpleNamespace(kv_transfer_config=SimpleNamespace(
        kv_connector_extra_config=extra_config))
    prom = OffloadPromMetrics(
        config,  # type: ignore[arg-type]
        {Gauge: bound(Gauge), Counter: bound(Counter), Histogram: bound(Histogram)},
        ["model_name", "engine"], {0: [harness.MODEL, "0"]})
    return prom, registry


def _series(scrape: str, name: str, **labels: str) -> float:
    """The value of the one sample of ``name`` carrying ``labels``."""
    found = []
    for line in scrape.splitlines():
        match = re.fullmatch(r"([^{ ]+)\{(.*)\} (\S+)", line)
        if not match or match.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        if all(have.get(k) == v for k, v in labels.items()):
            found.append(float(match.group(3)))
    assert len(found) == 1, f"{name} {labels}: {found}"
    return found[0]


def test_a_scrape_shows_what_the_tier_did(
    moto_server: str, bucket: str, s3_client: Any
) -> None:
    entry = managed.s3_entry(f"s3://{bucket}/team/kv", endpoint_url=moto_server)
    keys = harness.keys(5, start=40)
    with managed.manager_with(entry) as manager:
        prom, registry = _prometheus(manager.secondary_tiers[0]._offloading_spec.extra_config)
        tier = manager.secondary_tiers[0]
        payload = managed.store(manager, keys, seed=1)
        # damage two blocks behind s3kv's back, keeping their recorded checksums: one
        # changed in place, one cut short
        for key, body in ((keys[3], bytes(harness.ROW_BYTES)), (keys[4], b"short")):
            object_key = tier.uploader.keys.key_for(key)
            meta = s3_client.head_object(Bucket=bucket, Key=object_key)["Metadata"]
            s3_client.put_object(Bucket=bucket, Key=object_key, Metadata=meta, Body=body)
        verdicts, loaded = managed.load(manager, keys[:3], req="r1")
        assert verdicts == [LookupResult.HIT] * 3  # answered by the presence cache
        assert loaded is not None and np.array_equal(loaded, payload[:3])
        assert managed.load(manager, keys[3:4], req="r2")[0] == [LookupResult.MISS]
        assert managed.load(manager, keys[4:], req="r2b")[0] == [LookupResult.MISS]
        absent = harness.keys(2, start=4000)
        assert managed.load(manager, absent, req="r3")[0] == [LookupResult.MISS] * 2
        stats = manager.get_stats()
        prom.observe(stats.data)
        assert manager.get_stats() is None or "vllm:kv_offload_s3kv_requests" not in (
            manager.get_stats().data["data"])  # drained
    scrape = generate_latest(registry).decode()
    SCRAPE.write_text(scrape)

    def s3kv(name: str, **labels: str) -> float:
        return _series(scrape, f"vllm:kv_offload_s3kv_{name}", tier=TIER, **labels)

    row = harness.ROW_BYTES
    assert s3kv("requests_total", operation="put", outcome="created") == 6  # 5 + manifest
    assert s3kv("requests_total", operation="get", outcome="not_found") == 1  # no manifest yet
    # 3 blocks and the tampered one twice; the manifest was read once, by the tier at
    # start (loads and lookups never read it: not on the dispatch thread)
    assert s3kv("requests_total", operation="get", outcome="ok") == 5
    assert s3kv("requests_total", operation="get", outcome="size_mismatch") == 1
    assert s3kv("requests_total", operation="head", outcome="not_found") == 2
    assert s3kv("blocks_total", operation="store", outcome="done") == 5
    assert s3kv("blocks_total", operation="load", outcome="done") == 3
    assert s3kv("blocks_total", operation="load", outcome="failed") == 2
    assert s3kv("bytes_total", operation="store") == 5 * row
    assert s3kv("bytes_total", operation="load") == 3 * row
    assert s3kv("integrity_failures_total", kind="checksum") == 2  # the read and the re-read
    assert s3kv("integrity_failures_total", kind="size") == 1  # refused before any byte lands
    assert s3kv("lookup_heads_total") == 2
    assert s3kv("lookup_cache_answers_total") == 5
    assert s3kv("transfer_seconds_count", operation="store", outcome="ok") == 1
    assert s3kv("transfer_seconds_count", operation="load", outcome="ok") == 1
    assert s3kv("transfer_seconds_count", operation="load", outcome="failed") == 2
    # vLLM's own tier series carry the same tier label, so the two join
    assert _series(scrape, "vllm:kv_offload_tiering_write_bytes_total", tier=TIER) == 5 * row
    assert "# TYPE vllm:kv_offload_s3kv_transfer_seconds histogram" in scrape


class _Flaky(LocalStore):
    """The first PUT of each block fails transiently; submit_put runs inline."""

    def __init__(self, root: Path, *, async_path: bool) -> None:
        super().__init__(root)
        self.async_path = async_path
        self.seen: set[str] = set()

    @reported  # the flake is a request that failed: reported like the store's own
    def put(self, key: str, data: Any, options: PutOptions) -> bool:
        if not key.endswith("config.json") and key not in self.seen:
            self.seen.add(key)
            raise TransientStoreError(f"{key}: 503 SlowDown")
        return super().put(key, data, options)

    def can_submit(self, size: int) -> bool:
        return self.async_path

    def submit_put(self, key: str, data: memoryview, options: PutOptions,
                   done: Callable[[bool | None, BaseException | None], None]) -> None:
        try:
            created = self.put(key, data, options)
        except TransientStoreError as exc:
            done(None, exc)
        else:
            done(created, None)

    def submit_get_into(self, key: str, buffer: memoryview,
                        done: Callable[[ObjectInfo | None, BaseException | None], None],
                        *, parts: int = 1) -> None:
        raise AssertionError("not used")


@pytest.mark.parametrize("async_path", [False, True], ids=["threads", "pipelined"])
def test_retries_are_counted_on_both_data_paths(tmp_path: Path, async_path: bool) -> None:
    """Each retry is known from the attempt that sent it (with_retries on the threads'
    path, the pipelined job's own retries on the other), not guessed."""
    meter = TierMeter(TIER)
    events: list[RequestEvent] = []

    def hook(event: RequestEvent) -> None:
        events.append(event)
        meter.on_request(event)

    store = _Flaky(tmp_path, async_path=async_path)
    store.on_request = hook
    namespace = Namespace(model_name="m", tokens_per_hash=16, dtype="float16")
    with Uploader(tmp_path, namespace, store=store) as up:
        report = up.put_blocks({k: bytes(64) for k in harness.keys(3)})
    assert len(report.done) == 3
    blocks = {e.key for e in events if e.operation == "put" and "config.json" not in e.key}
    assert len(blocks) == 3
    for key in blocks:
        puts = [(e.attempt, e.outcome, e.nbytes) for e in events if e.key == key]
        assert puts == [(1, "transient", 0), (2, "created", 64)]
    stats = meter.take_stats()
    assert stats is not None
    data = stats.data["data"]
    assert data["vllm:kv_offload_s3kv_retries"] == {(TIER, "put"): 3}
    assert data["vllm:kv_offload_s3kv_requests"][(TIER, "put", "transient")] == 3
    assert data["vllm:kv_offload_s3kv_requests"][(TIER, "put", "created")] == 4  # + manifest
    assert meter.take_stats() is None


def test_requests_are_counted_by_operation_and_outcome(tmp_path: Path) -> None:
    """Every outcome the hook reports lands in its series; a size failure is also an
    integrity failure; a first attempt is no retry."""
    meter = TierMeter(TIER)
    store = LocalStore(tmp_path)
    store.on_request = meter.on_request
    assert store.put("a", b"xyz", PutOptions()) is True
    assert store.put("a", b"xyz", PutOptions()) is False
    assert store.head("a") is not None
    assert store.head("b") is None
    with pytest.raises(ObjectNotFoundError):
        store.get("b")
    with pytest.raises(SizeMismatchError):
        store.get_into("a", memoryview(bytearray(5)))
    stats = meter.take_stats()
    assert stats is not None
    data = stats.data["data"]
    assert data["vllm:kv_offload_s3kv_requests"] == {
        (TIER, "put", "created"): 1,
        (TIER, "put", "exists"): 1,
        (TIER, "head", "ok"): 1,
        (TIER, "head", "not_found"): 1,
        (TIER, "get", "not_found"): 1,
        (TIER, "get", "size_mismatch"): 1,
    }
    assert data["vllm:kv_offload_s3kv_integrity_failures"] == {(TIER, "size"): 1}
    assert "vllm:kv_offload_s3kv_retries" not in data


def test_every_metric_the_tier_registers_is_in_the_docs() -> None:
    from vllm.v1.kv_offload.base import OffloadingCounterMetadata

    from s3kv.vllm._metrics import metric_definitions

    docs = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    for name, meta in metric_definitions().items():
        shown = f"{name}_total" if isinstance(meta, OffloadingCounterMetadata) else name
        assert f"| `{shown}` |" in docs, shown
