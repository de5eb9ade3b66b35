"""Tier metrics by tenant, on a bounded set of labels.

A Prometheus series lives as long as the process that exported it, so a ``tenant`` label
that took every tenant id a router sends would grow without bound. The first
:data:`TENANT_LABELS` tenants the tier serves keep a label of their own for its life;
every later one is counted as ``other`` (``s3kv ls`` counts each tenant's bytes in the
bucket, whatever their number). Requests the tier did not offload because of their
tenant field are counted by reason.
"""

from __future__ import annotations

import threading

from vllm.v1.kv_offload.base import OffloadingCounterMetadata, OffloadingMetricMetadata

from s3kv.report import TransferReport
from s3kv.vllm._metrics import PREFIX, TierMeter

try:
    from vllm.v1.kv_offload.tiering.base import TIER_LABEL
except ImportError:  # vLLM 0.32.0 uses the same label without naming it
    TIER_LABEL = "tier"

TENANT_BLOCKS = PREFIX + "tenant_blocks"
TENANT_BYTES = PREFIX + "tenant_bytes"
NOT_OFFLOADED = PREFIX + "requests_not_offloaded"

TENANT_LABELS = 16
"""Tenants with a label of their own; the rest are ``other``."""

OTHER = "other"


def tenant_metric_definitions() -> dict[str, OffloadingMetricMetadata]:
    return {
        TENANT_BLOCKS: OffloadingCounterMetadata(
            documentation="Blocks of finished s3kv jobs by tenant (the first 16 the tier "
            "served; later ones as 'other'), operation (store, load) and outcome (done, "
            "already_present, missing, failed).",
            labelnames=(TIER_LABEL, "tenant", "operation", "outcome"),
        ),
        TENANT_BYTES: OffloadingCounterMetadata(
            documentation="Payload bytes the s3kv tier stored and loaded, by tenant (the "
            "first 16 the tier served; later ones as 'other') and operation.",
            labelnames=(TIER_LABEL, "tenant", "operation"),
        ),
        NOT_OFFLOADED: OffloadingCounterMetadata(
            documentation="Requests the s3kv tier did not offload because of their tenant "
            "field, by reason: invalid_tenant (kv_transfer_params[\"s3kv_tenant\"] breaks "
            "the rule), no_tenant (none given where the tier requires one).",
            labelnames=(TIER_LABEL, "reason"),
        ),
    }


class TenantMeter:
    """Counts by tenant into the tier's :class:`TierMeter` (drained with its stats)."""

    def __init__(self, meter: TierMeter, limit: int = TENANT_LABELS) -> None:
        self.meter = meter
        self.limit = limit
        self._labelled: set[str] = set()
        self._lock = threading.Lock()

    def label(self, tenant: str) -> str:
        """``tenant``, while fewer than ``limit`` tenants have a label; else ``other``."""
        if tenant in self._labelled:
            return tenant
        with self._lock:
            if len(self._labelled) < self.limit:
                self._labelled.add(tenant)
                return tenant
        return OTHER

    def on_job(self, tenant: str | None, *, is_load: bool, report: TransferReport | None) -> None:
        """A finished job of ``tenant`` (None: no tenant, not counted here)."""
        if tenant is None or report is None:
            return
        label, operation = self.label(tenant), "load" if is_load else "store"
        for outcome, n in (
            ("done", len(report.done)),
            ("already_present", len(report.already_present)),
            ("missing", len(report.missing)),
            ("failed", len(report.failed)),
        ):
            if n:
                self.meter.count(TENANT_BLOCKS, label, operation, outcome, by=n)
        if report.bytes:
            self.meter.count(TENANT_BYTES, label, operation, by=report.bytes)

    def not_offloaded(self, reason: str) -> None:
        self.meter.count(NOT_OFFLOADED, reason)
