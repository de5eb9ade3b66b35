"""A real tier run that moves every series the dashboard shows, and vLLM's scrape of it.

vLLM's real TieringOffloadingManager with one s3kv tier (CPU primary, no GPU) on an S3
endpoint: each :func:`exercise` round stores blocks, looks up and loads some (hits,
renewed once older than ``renew_after``), looks up blocks never stored (misses), loads
one changed behind the tier's back (an integrity failure) and one deleted behind its back
(a removal). :class:`Scraper` is vLLM's OffloadingConnector Prometheus path
(``OffloadPromMetrics``) on a registry of its own: what ``/metrics`` would serve.
Used by tests/vllm/test_dashboard.py and scripts/dashboard_run.py (the picture in
docs/metrics.md).
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadPromMetrics

from tests.vllm import harness, managed

RENEW_AFTER = 1.0
"""Seconds: a block used more than this after its write is renewed (moto lists whole
seconds, so a round waits a little over two before it loads)."""


class Scraper:
    """vLLM's Prometheus metrics of one manager's tiers, and their text exposition."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.registry = CollectorRegistry()
        registry = self.registry

        def bound(cls: type) -> type:
            def init(self: Any, *args: Any, **kwargs: Any) -> None:
                cls.__init__(self, *args, registry=registry, **kwargs)

            return type(cls.__name__, (cls,), {"__init__": init})

        extra = manager.secondary_tiers[0]._offloading_spec.extra_config
        config = SimpleNamespace(
            kv_transfer_config=SimpleNamespace(kv_connector_extra_config=extra))
        self.prom = OffloadPromMetrics(
            config,  # type: ignore[arg-type]
            {Gauge: bound(Gauge), Counter: bound(Counter), Histogram: bound(Histogram)},
            ["model_name", "engine"], {0: [harness.MODEL, "0"]})

    def observe(self) -> None:
        """What vLLM does each step: drain the manager's stats into Prometheus."""
        with harness.locked(self.manager):
            stats = self.manager.get_stats()
        if stats is not None:
            self.prom.observe(stats.data)

    def text(self) -> str:
        self.observe()
        return generate_latest(self.registry).decode()


def exercise(manager: Any, s3_client: Any, bucket: str, *, round: int, stored: int = 6) -> None:
    """One round of traffic (see the module); ``round`` keeps each round's keys apart."""
    assert stored >= 5, "three hits, one block damaged and one deleted"
    tier = manager.secondary_tiers[0]
    base = 10_000 * (round + 1)
    keys = harness.keys(stored, start=base)
    managed.store(manager, keys, seed=round)
    time.sleep(2.2 * RENEW_AFTER)  # old enough to be renewed when used
    managed.load(manager, keys[:3], req=f"hit-{round}")
    managed.load(manager, harness.keys(2, start=base + 5000), req=f"miss-{round}")
    changed, deleted = keys[3], keys[4]
    changed_key = tier.uploader.keys.key_for(changed)
    meta = s3_client.head_object(Bucket=bucket, Key=changed_key)["Metadata"]
    s3_client.put_object(Bucket=bucket, Key=changed_key, Metadata=meta,
                         Body=bytes(harness.ROW_BYTES))  # fmt: skip
    s3_client.delete_object(Bucket=bucket, Key=tier.uploader.keys.key_for(deleted))
    managed.load(manager, [changed], req=f"changed-{round}")
    managed.load(manager, [deleted], req=f"deleted-{round}")
    managed.settle(manager)
    assert tier.renewer.flush(10.0), "renewals still queued"
