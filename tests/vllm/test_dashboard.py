"""Issue 29, point 6: every panel of the Grafana dashboard queries what is really exported.

The exported names come from a real run, not a list kept by hand: vLLM's real
TieringOffloadingManager with s3kv's tier on moto's S3 server goes through one round of
traffic (tests/vllm/tier_run.py), vLLM's own Prometheus path prints the scrape, and
``s3kv ls --prometheus`` prints the bucket's. A metric a panel names must be in one of
them (a family that had no sample in the run is taken from the real definitions the
tier and vLLM registered, and must appear in the scrape as a TYPE line); every label a
panel filters on, groups by or shows in a legend must be one that metric carries; and a
label compared with ``=`` to a value must have been seen with that value in the run.
(Grafana's schema: tests/unit/test_grafana_dashboard.py.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from vllm.v1.kv_offload.base import (
    OffloadingCounterMetadata,
    OffloadingHistogramMetadata,
)

from s3kv.cli.ls_prometheus import exposition
from s3kv.ops.inventory import inventory
from s3kv.settings import S3Settings
from s3kv.vllm._metrics import metric_definitions
from tests.conftest import ARTIFACTS, ROOT
from tests.vllm import managed, tier_run

pytestmark = pytest.mark.vllm

DASHBOARD = json.loads((ROOT / "grafana" / "s3kv-dashboard.json").read_text())
ENGINE_LABELS = {"model_name", "engine"}  # OffloadPromMetrics adds them to every series
METRIC = re.compile(r"\b((?:vllm:|s3kv_)[A-Za-z0-9_:]*)")
SELECTOR = re.compile(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")

Exported = dict[str, dict[str, set[str]]]
"""Sample name -> label name -> values seen in the run."""


def sample_names(family: str, kind: str) -> list[str]:
    if kind == "counter":
        return [f"{family}_total"]
    if kind == "histogram":
        return [f"{family}_bucket", f"{family}_sum", f"{family}_count"]
    return [family]


def from_scrape(text: str, into: Exported) -> set[str]:
    """Add what a scrape exports; return its family names (samples or not)."""
    families = set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for name in sample_names(family.name, family.type):
            into.setdefault(name, {})
        for sample in family.samples:
            labels = into.setdefault(sample.name, {})
            for key, value in sample.labels.items():
                labels.setdefault(key, set()).add(value)
    return families


def from_definitions(definitions: dict[str, Any], into: Exported) -> set[str]:
    """Add what registered definitions export (labels, no values); return their names."""
    for family, meta in definitions.items():
        kind = (
            "counter" if isinstance(meta, OffloadingCounterMetadata)
            else "histogram" if isinstance(meta, OffloadingHistogramMetadata) else "gauge"
        )  # fmt: skip
        extra = {"le"} if kind == "histogram" else set()
        for name in sample_names(family, kind):
            labels = into.setdefault(name, {})
            for label in {*meta.labelnames, *ENGINE_LABELS, *(extra if "_bucket" in name else ())}:
                labels.setdefault(label, set())
    return set(definitions)


@pytest.fixture(scope="module")
def exported(moto_server: str) -> Exported:
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=moto_server, config=Config(
        s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
        response_checksum_validation="when_required"))  # fmt: skip
    bucket = "s3kv-dashboard-test"
    s3.create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/kv"
    entry = managed.s3_entry(url, endpoint_url=moto_server, renew_after=tier_run.RENEW_AFTER)
    out: Exported = {}
    with managed.manager_with(entry) as manager:
        scraper = tier_run.Scraper(manager)
        tier_run.exercise(manager, s3, bucket, round=0)
        scrape = scraper.text()
        spec = manager.secondary_tiers[0]._offloading_spec
        vllm_definitions = type(spec).build_metric_definitions(spec.extra_config)
    Path(ARTIFACTS).mkdir(exist_ok=True)
    (ARTIFACTS / "dashboard-run-scrape.txt").write_text(scrape)
    scraped = from_scrape(scrape, out)
    defined = from_definitions({**vllm_definitions, **metric_definitions()}, out)
    assert defined <= scraped, defined - scraped  # every registered metric is on /metrics
    bucket_text = exposition(inventory(url, settings=S3Settings.resolve(endpoint_url=moto_server)))
    from_scrape(bucket_text, out)
    return out


def targets() -> list[tuple[str, str, str]]:
    """(panel title, expression, legend) of every query of every panel."""
    return [
        (panel["title"], target["expr"], target.get("legendFormat", ""))
        for panel in DASHBOARD["panels"]
        for target in panel.get("targets", ())
    ]


def test_the_run_moved_what_the_dashboard_shows(exported: Exported) -> None:
    """The run is worth checking against: hits, renewals, removals and damage happened."""
    for name, label, value in (
        ("vllm:kv_offload_tiering_chunk_hits_total", "tier", "1:S3TierManager"),
        ("vllm:kv_offload_s3kv_renewals_total", "outcome", "renewed"),
        ("vllm:kv_offload_s3kv_removed_blocks_total", "tier", "1:S3TierManager"),
        ("vllm:kv_offload_s3kv_integrity_failures_total", "kind", "checksum"),
        ("vllm:kv_offload_s3kv_blocks_total", "outcome", "missing"),
        ("s3kv_cache_bytes", "last_use", "within_1h"),
    ):
        assert value in exported[name].get(label, set()), (name, label)


@pytest.mark.parametrize(("title", "expr", "legend"), targets(), ids=[t[0] for t in targets()])
def test_every_panel_queries_an_exported_metric(
    exported: Exported, title: str, expr: str, legend: str
) -> None:
    names = METRIC.findall(expr)
    assert names, f"{title}: no s3kv or vLLM metric in {expr!r}"
    unknown = [n for n in names if n not in exported]
    assert not unknown, f"{title}: not exported by the tier or s3kv ls: {unknown}"
    labels_here: set[str] = set()
    for name, matchers in SELECTOR.findall(expr):
        assert name in exported, f"{title}: {name} is not exported"
        labels = exported[name]
        labels_here |= set(labels)
        for label, op, value in MATCHER.findall(matchers):
            assert label in labels, f"{title}: {name} has no label {label!r}"
            if op == "=" and labels[label]:
                assert value in labels[label], f"{title}: {name}{{{label}={value!r}}} never seen"
    for clause in GROUPING.findall(expr):
        for label in filter(None, (part.strip() for part in clause.split(","))):
            assert label in labels_here, f"{title}: grouped by {label!r}, which no metric has"
    for label in LEGEND.findall(legend):
        assert label in labels_here, f"{title}: legend shows {label!r}, which no metric has"


def test_the_hit_rate_query_in_the_docs_is_the_dashboards() -> None:
    docs = (ROOT / "docs" / "metrics.md").read_text()
    (hit,) = [t for t in targets() if t[0] == "Hit rate"]
    every_s3kv_tier = hit[1].replace(
        '{model_name=~"$model_name", tier=~"$tier"}', '{tier=~".*:S3TierManager"}'
    )
    assert every_s3kv_tier.replace("$__rate_interval", "5m") in docs
