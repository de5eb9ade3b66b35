"""Issue 29, point 6: grafana/s3kv-dashboard.json loads in Grafana's own schema.

No Grafana server: Grafana publishes the types of its dashboard JSON model and of each
panel's options (generated from its CUE kinds) in the npm package @grafana/schema;
scripts/grafana-schema.sh turns them into JSON Schema, vendored in tests/data/grafana/
(README.md there: version, checksum, how). The dashboard must validate against the
dashboard schema (no unknown field, every type right), each panel's options against its
panel type's schema, and a time series' field config against that panel's; the grid and
the queries must hold together. (That every query names what a real tier exports:
tests/vllm/test_dashboard.py.)
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from s3kv.cli.ls_prometheus import METRICS, PREFIX

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "grafana" / "s3kv-dashboard.json").read_text())
SCHEMAS = ROOT / "tests" / "data" / "grafana"
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range"}


def validator(name: str) -> Any:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def errors(name: str, document: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator(name).iter_errors(document)]


def panels() -> list[dict[str, Any]]:
    return [p for p in DASHBOARD["panels"] if p["type"] != "row"]


def test_the_dashboard_validates_against_grafanas_schema() -> None:
    assert errors("dashboard", DASHBOARD) == []


@pytest.mark.parametrize("panel", panels(), ids=[p["title"] for p in panels()])
def test_each_panels_options_validate_against_its_type(panel: dict[str, Any]) -> None:
    assert panel["type"] in ("timeseries", "stat"), "vendor the schema of a new panel type"
    assert errors(f"{panel['type']}-options", panel["options"]) == []
    if panel["type"] == "timeseries":
        assert errors("timeseries-fieldconfig", panel["fieldConfig"]["defaults"]["custom"]) == []


@pytest.mark.parametrize(
    ("where", "broken"),
    [
        ("an unknown dashboard field", lambda d: d.update(refersh="30s")),
        ("a grid position as text", lambda d: d["panels"][1]["gridPos"].update(x="0")),
        ("a panel type that is no string", lambda d: d["panels"][1].update(type=3)),
        ("a variable without a name", lambda d: d["templating"]["list"][1].pop("name")),
    ],
)
def test_the_schema_has_teeth(where: str, broken: Any) -> None:
    dashboard = copy.deepcopy(DASHBOARD)
    broken(dashboard)
    assert errors("dashboard", dashboard), where
    legend = copy.deepcopy(panels()[1]["options"])
    legend["legend"]["placement"] = "middle"
    assert errors("timeseries-options", legend)


def test_the_grid_and_the_queries_hold_together() -> None:
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in DASHBOARD["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}  # fmt: skip
        assert not cells & area, f"{panel['title']} overlaps another panel"
        cells |= area
    defined = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert "datasource" in defined
    for panel in panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)) and refs, panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert target["datasource"]["uid"] == "${datasource}"
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}")
            used = set(re.findall(r"\$(\w+)", expr))
            assert used <= defined | GRAFANA_VARIABLES, (panel["title"], used - defined)


def test_the_bucket_panels_query_what_s3kv_ls_prometheus_prints() -> None:
    printed = {PREFIX + name for name in METRICS}
    queried = {
        name
        for panel in panels()
        for target in panel["targets"]
        for name in re.findall(r"\b(s3kv_[a-z_]+)", target["expr"])
    }
    assert queried and queried <= printed, queried - printed


def test_the_vendored_schema_says_where_it_comes_from() -> None:
    readme = (SCHEMAS / "README.md").read_text()
    script = (ROOT / "scripts" / "grafana-schema.sh").read_text()
    version = re.search(r"GRAFANA_SCHEMA_VERSION=(\S+)", script)
    assert version and f"@grafana/schema {version.group(1)}" in readme
    assert "sha512-" in readme and "scripts/grafana-schema.sh" in readme
    for path in SCHEMAS.glob("*.schema.json"):
        assert path.name in readme, path.name


def test_the_picture_in_the_docs_is_of_this_dashboards_queries() -> None:
    """docs/img/dashboard.png is drawn from docs/img/dashboard.json: the answers a real
    Prometheus gave to these very queries (scripts/dashboard_run.py; rerun it when a
    panel changes)."""
    drawn = json.loads((ROOT / "docs" / "img" / "dashboard.json").read_text())
    assert [(p["title"], [t["expr"] for t in p["targets"]]) for p in drawn["panels"]] == [
        (p["title"], [t["expr"] for t in p["targets"]]) for p in panels()
    ]
    empty = [p["title"] for p in drawn["panels"]
             if not any(t["result"] for t in p["targets"])]  # fmt: skip
    assert empty == [], f"panels the run left without data: {empty}"
    assert drawn["prometheus"].startswith("prometheus, version")
