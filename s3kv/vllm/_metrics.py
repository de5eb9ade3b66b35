"""Tier metrics for vLLM's Prometheus path (``OffloadingConnectorStats``).

vLLM 0.33.0 asks each secondary tier for ``build_metric_definitions`` (once, to register
the Prometheus metrics) and ``get_stats`` (every step, to drain what happened since).
Everything here is labelled ``tier`` with the value vLLM's ``TieringMetricsTracker``
gives the same tier (``"<1-based index>:<type>"``), so s3kv's series join vLLM's own.

What is counted, and where:

* requests by operation and outcome, retries, size failures: :meth:`TierMeter.on_request`,
  the tier's store's request hook (:attr:`s3kv.stores.base.Store.on_request`): every
  request reports its outcome and the attempt that sent it, so a retry is known;
* checksum failures and blocks without one: what the data path's loads noted
  (:mod:`s3kv.worker.loads`), counted by :mod:`s3kv.vllm._loads`;
* blocks and bytes by outcome, store/load latency: each finished job's report;
* lookup HEADs and answers from the presence cache: the lookup manager's
  ``heads_sent``/``cache_answers`` totals, read at each ``get_stats``;
* the store's bad days (:mod:`s3kv.vllm._health`): the breaker and the write pause as
  gauges set when they change, lookups answered MISS without the store's verdict and
  stores declined by reason, wait budgets that ran out, damaged blocks replaced, and
  blocks loaded (or refused) without a recorded checksum.
"""

from __future__ import annotations

import threading
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
    OffloadingConnectorStats,
)
from vllm.v1.kv_offload.base import (
    OffloadingCounterMetadata,
    OffloadingGaugeMetadata,
    OffloadingHistogramMetadata,
    OffloadingMetricMetadata,
)

from s3kv.report import TransferReport
from s3kv.stores.base import RequestEvent

try:
    from vllm.v1.kv_offload.tiering.base import TIER_LABEL
except ImportError:  # vLLM 0.32.0 uses the same label without naming it
    TIER_LABEL = "tier"

PREFIX = "vllm:kv_offload_s3kv_"
REQUESTS = PREFIX + "requests"
RETRIES = PREFIX + "retries"
BLOCKS = PREFIX + "blocks"
BYTES = PREFIX + "bytes"
INTEGRITY_FAILURES = PREFIX + "integrity_failures"
LOOKUP_HEADS = PREFIX + "lookup_heads"
LOOKUP_CACHE_ANSWERS = PREFIX + "lookup_cache_answers"
SKIPPED_STORE_BLOCKS = PREFIX + "read_only_skipped_blocks"
TRANSFER_SECONDS = PREFIX + "transfer_seconds"
RENEWALS = PREFIX + "renewals"
REMOVED_BLOCKS = PREFIX + "removed_blocks"
RETAGS = PREFIX + "retags"
BREAKER_OPEN = PREFIX + "breaker_open"
BREAKER_OPENINGS = PREFIX + "breaker_openings"
STORES_PAUSED = PREFIX + "stores_paused"
SKIPPED_LOOKUPS = PREFIX + "skipped_lookups"
DROPPED_STORE_BLOCKS = PREFIX + "dropped_store_blocks"
BUDGET_EXPIRED = PREFIX + "budget_expired"
HEALED_BLOCKS = PREFIX + "healed_blocks"
UNVERIFIED_BLOCKS = PREFIX + "unverified_blocks"
RENEWAL_OUTCOMES = ("renewed", "already_renewed", "changed", "gone", "failed", "dropped")
""":class:`s3kv.ops.gc.renewal.Renewer` counters, each an ``outcome`` of :data:`RENEWALS`."""

TRANSFER_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

def metric_definitions() -> dict[str, OffloadingMetricMetadata]:
    """The Prometheus metrics every s3kv tier reports (one set for all s3kv tiers)."""
    tier = (TIER_LABEL,)
    return {
        REQUESTS: OffloadingCounterMetadata(
            documentation="S3 requests sent by the s3kv tier, by operation (get, put, "
            "head, copy, tagging) and outcome (ok, created, exists, not_found, "
            "size_mismatch, transient, denied, error). A copy is a renewal (see "
            "renewals); each is preceded by a head that looks first.",
            labelnames=(*tier, "operation", "outcome"),
        ),
        RETRIES: OffloadingCounterMetadata(
            documentation="S3 requests the s3kv tier sent again after a transient failure.",
            labelnames=(*tier, "operation"),
        ),
        BLOCKS: OffloadingCounterMetadata(
            documentation="Blocks of finished s3kv jobs, by operation (store, load) and "
            "outcome (done, already_present, missing, failed).",
            labelnames=(*tier, "operation", "outcome"),
        ),
        BYTES: OffloadingCounterMetadata(
            documentation="Payload bytes the s3kv tier stored (store) and loaded (load).",
            labelnames=(*tier, "operation"),
        ),
        INTEGRITY_FAILURES: OffloadingCounterMetadata(
            documentation="Loaded blocks whose checksum or size was wrong (a checksum "
            "failure is read once more before the block fails).",
            labelnames=(*tier, "kind"),
        ),
        LOOKUP_HEADS: OffloadingCounterMetadata(
            documentation="Presence looks sent by the s3kv tier's lookups (a GET of a "
            "block's first byte each; the name is from when they were HEADs).",
            labelnames=tier,
        ),
        LOOKUP_CACHE_ANSWERS: OffloadingCounterMetadata(
            documentation="Lookup answers the s3kv tier served from its presence cache "
            "(no request).",
            labelnames=tier,
        ),
        SKIPPED_STORE_BLOCKS: OffloadingCounterMetadata(
            documentation="Blocks a read-only s3kv tier declined to store.",
            labelnames=tier,
        ),
        RENEWALS: OffloadingCounterMetadata(
            documentation="Used blocks the s3kv tier renewed (a copy onto itself, so the "
            "bucket's lifecycle and gc count from the last use), by outcome: renewed; "
            "already_renewed (another node renewed it since this one saw it: no copy); "
            "changed (not the object seen: left alone); gone; failed; dropped (the "
            "renewal queue was full).",
            labelnames=(*tier, "outcome"),
        ),
        RETAGS: OffloadingCounterMetadata(
            documentation="Block tags the s3kv tier put back after a renewal on a store "
            "whose copies drop them (Ceph RGW), by outcome: failed (the lifecycle rule "
            "cannot see the block until its next use re-tags it); repaired (such a "
            "block carries its tag again).",
            labelnames=(*tier, "outcome"),
        ),
        REMOVED_BLOCKS: OffloadingCounterMetadata(
            documentation="Blocks the s3kv tier had seen present and then found gone "
            "(expired or collected); each is announced as a KV event with removed=True "
            "when KV events are on.",
            labelnames=tier,
        ),
        BREAKER_OPEN: OffloadingGaugeMetadata(
            documentation="1 while the s3kv tier's breaker is open (the store failed "
            "breaker_failures times in a row: lookups answer miss at once, loads fail at "
            "once, stores are declined, until a probe finds the store answering), else 0.",
            labelnames=tier,
        ),
        BREAKER_OPENINGS: OffloadingCounterMetadata(
            documentation="Times the s3kv tier's breaker opened.",
            labelnames=tier,
        ),
        STORES_PAUSED: OffloadingGaugeMetadata(
            documentation="1 while the s3kv tier pauses stores after a write the store "
            "refused for good (denied, or full): one block tries again each minute.",
            labelnames=tier,
        ),
        SKIPPED_LOOKUPS: OffloadingCounterMetadata(
            documentation="Lookups the s3kv tier answered miss without the store's "
            "verdict (vLLM recomputes), in keys, by reason: breaker (open), budget (the "
            "request's wait budget ran out), slow_store (its load would not end within "
            "the budget left).",
            labelnames=(*tier, "reason"),
        ),
        DROPPED_STORE_BLOCKS: OffloadingCounterMetadata(
            documentation="Blocks the s3kv tier declined to store, by reason: breaker "
            "(open), refused (stores paused after a refused write).",
            labelnames=(*tier, "reason"),
        ),
        BUDGET_EXPIRED: OffloadingCounterMetadata(
            documentation="Requests whose wait budget ran out, by operation: lookup "
            "(answered miss) or load (cancelled, its blocks recomputed).",
            labelnames=(*tier, "operation"),
        ),
        HEALED_BLOCKS: OffloadingCounterMetadata(
            documentation="Damaged blocks (a load failed their checksum) the s3kv tier "
            "replaced with the next store of their key (If-Match on the damaged copy).",
            labelnames=tier,
        ),
        UNVERIFIED_BLOCKS: OffloadingCounterMetadata(
            documentation="Blocks stored without a recorded checksum (vLLM's obj tier "
            "writes them) that a load met, by outcome: loaded (size-checked only) or "
            "refused (require_checksum).",
            labelnames=(*tier, "outcome"),
        ),
        TRANSFER_SECONDS: OffloadingHistogramMetadata(
            documentation="Duration of s3kv store and load jobs, from their first request "
            "to their last block, in seconds.",
            labelnames=(*tier, "operation", "outcome"),
            buckets=TRANSFER_SECONDS_BUCKETS,
        ),
    }


def tier_label(offloading_spec: Any, tier_type: str, url: str) -> str:
    """The ``tier`` label vLLM's ``TieringMetricsTracker`` gives this tier.

    The tier is not told its index, so it is found among the spec's ``secondary_tiers``
    by type and URL; without a unique match, the type alone.
    """
    entries = getattr(offloading_spec, "extra_config", {}).get("secondary_tiers") or []
    matches = [
        i
        for i, entry in enumerate(entries)
        if isinstance(entry, dict) and entry.get("type") == tier_type and entry.get("url") == url
    ]
    return f"{matches[0] + 1}:{tier_type}" if len(matches) == 1 else tier_type


class TierMeter:
    """Thread-safe counters and samples of one tier, drained by :meth:`take_stats`."""

    def __init__(self, tier: str) -> None:
        self.tier = tier
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, tuple[str, ...]], float] = {}
        self._samples: dict[tuple[str, tuple[str, ...]], list[float]] = {}
        self._gauges: dict[tuple[str, tuple[str, ...]], float] = {}
        self._lookups_seen = (0, 0)
        self._totals_seen: dict[tuple[str, tuple[str, ...]], float] = {}

    def count(self, name: str, *labels: str, by: float = 1) -> None:
        key = (name, (self.tier, *labels))
        with self._lock:
            self._counters[key] = self._counters.get(key, 0) + by

    def gauge(self, name: str, value: float, *labels: str) -> None:
        """Set a gauge (sent with the next stats; Prometheus keeps it until set again)."""
        with self._lock:
            self._gauges[(name, (self.tier, *labels))] = value

    def observe(self, name: str, value: float, *labels: str) -> None:
        key = (name, (self.tier, *labels))
        with self._lock:
            self._samples.setdefault(key, []).append(value)

    def on_request(self, event: RequestEvent) -> None:
        """One request of the tier's store (its hook): by operation and outcome; a retry
        when its attempt is not the first; a size failure when it was refused for size.
        Renewals are ``copy`` requests (``not_found`` when the object was gone or not the
        one seen). The tier sends no listings or deletes."""
        if event.attempt > 1:
            self.count(RETRIES, event.operation)
        if event.outcome == "size_mismatch":
            self.count(INTEGRITY_FAILURES, "size")
        self.count(REQUESTS, event.operation, event.outcome)

    def on_job(self, *, is_load: bool, report: TransferReport | None) -> None:
        """A finished job: blocks by outcome, bytes, and its duration."""
        operation = "load" if is_load else "store"
        if report is None:  # never started (shut down, or bad rows): nothing moved
            return
        for outcome, n in (
            ("done", len(report.done)),
            ("already_present", len(report.already_present)),
            ("missing", len(report.missing)),
            ("failed", len(report.failed)),
        ):
            if n:
                self.count(BLOCKS, operation, outcome, by=n)
        if report.bytes:
            self.count(BYTES, operation, by=report.bytes)
        self.observe(TRANSFER_SECONDS, report.seconds, operation, "ok" if report.ok else "failed")

    def on_lookups(self, heads_sent: int, cache_answers: int) -> None:
        """The lookup manager's running totals; only the increase since last time counts."""
        with self._lock:
            sent_before, cached_before = self._lookups_seen
            self._lookups_seen = (heads_sent, cache_answers)
        if heads_sent > sent_before:
            self.count(LOOKUP_HEADS, by=heads_sent - sent_before)
        if cache_answers > cached_before:
            self.count(LOOKUP_CACHE_ANSWERS, by=cache_answers - cached_before)

    def on_totals(self, name: str, totals: dict[tuple[str, ...], float]) -> None:
        """Running totals by labels (e.g. the renewer's); only the increase counts."""
        increases = []
        with self._lock:
            for labels, total in totals.items():
                before = self._totals_seen.get((name, labels), 0)
                self._totals_seen[(name, labels)] = total
                if total > before:
                    increases.append((labels, total - before))
        for labels, by in increases:
            self.count(name, *labels, by=by)

    def take_stats(self) -> OffloadingConnectorStats | None:
        with self._lock:
            counters, self._counters = self._counters, {}
            samples, self._samples = self._samples, {}
            gauges, self._gauges = self._gauges, {}
        if not counters and not samples and not gauges:
            return None
        stats = OffloadingConnectorStats()
        for (name, labels), value in counters.items():
            stats.increase_counter(name, value, labels)
        for (name, labels), value in gauges.items():
            stats.set_gauge(name, value, labels)
        for (name, labels), values in samples.items():
            for value in values:
                stats.observe_histogram(name, value, labels)
        return stats

