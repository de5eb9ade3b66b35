"""bench/bench_prompt_load.py, the instrument the load figures come from, end to end at a
tiny size on the AWS-like links (plain and TLS): both tiers and s3kv's at the obj tier's
connections, the ceilings, the stand-in EngineCore loop beside every load, every round's
load checked, and the proxy's counts show each tier's stores and loads went through it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.rgw]

CRT = "awscrt GETs (s3kv's settings)"


def test_the_prompt_benchmark_measures_both_tiers_and_the_ceilings_through_the_proxy(
        tmp_path: Path) -> None:
    from bench import bench_prompt_load

    out = tmp_path / "prompt-load.json"
    assert bench_prompt_load.main([
        "--links", "aws-like,aws-like-tls", "--tiers", "s3kv,vllm-obj,s3kv-16",
        "--prompts", "32", "--block-tokens", "16",
        "--kv-bytes-per-token", "4096", "--rounds", "2", "--warmup", "0",
        "--first-byte-ms", "5", "--connection-mb-s", "50", "--no-freeze", "--force-loaded",
        "--json", str(out), "--chart", str(tmp_path / "prompt-load.png")]) == 0
    doc = json.loads(out.read_text())
    rows = {(r["link"], r["who"]): r for r in doc["rows"]}
    whos = ("s3kv", "vllm-obj", "s3kv-16", CRT, "memcpy", "engine-idle")
    assert set(rows) == {(link, who) for link in ("aws-like", "aws-like-tls") for who in whos}
    assert {r["rounds"] for r in doc["rows"]} == {2}
    for link in ("aws-like", "aws-like-tls"):
        for tier in ("s3kv", "vllm-obj", "s3kv-16"):
            r = rows[(link, tier)]
            assert r["blocks"] == 2 and r["block_bytes"] == 64 * 1024
            assert len(r["load_s_runs"]) == len(r["store_s_runs"]) == 2
            assert {"lookup", "submit_store", "submit_load", "get_finished_jobs"} <= set(
                r["calls_us"])
            assert r["loop"]["steps_per_s"] > 0 and len(r["loop"]["steps_per_s_runs"]) == 2
            # RGW's own CPU over each job, apart from the client's (the proxy's is apart too);
            # a job this small may take less than a clock tick of it
            assert r["load_server_cpu_s_per_gib"] >= 0 <= r["store_server_cpu_s_per_gib"]
            seen = r["requests"]
            assert seen["store"]["PUT"] >= 2 and seen["load"]["GET"] >= 2
        assert rows[(link, "engine-idle")]["loop"]["steps_per_s"] > 0
        assert sum(rows[(link, tier)][f"{what}_server_cpu_s_per_gib"]
                   for tier in ("s3kv", "vllm-obj", "s3kv-16") for what in ("load", "store")) > 0
        assert rows[(link, CRT)]["settings"]["connections"] == 16
        assert rows[(link, CRT)]["requests"]["load"]["GET"] >= 2
        assert doc["meta"]["links"][link] == {"first_byte_ms": 5.0, "connection_mb_s": 50.0}
    from bench.lib import prompt_report as report

    assert "s3kv at obj's connections" in report.equal_footing(doc)
    assert "idle steps/s" in report.loop(doc)
    assert doc["loaded"] is True or doc["trust"]["load_average_1m"] <= 1


def test_the_prompt_benchmark_measures_what_a_key_per_tenant_costs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--tiers s3kv,s3kv-sse-c`` (docs/tenants.md): s3kv's tier with and without SSE-C
    on a TLS link, every load checked byte for byte, and the encryption table."""
    from bench import bench_prompt_load
    from bench.lib import prompt_report as report

    out = tmp_path / "prompt-load.json"
    assert bench_prompt_load.main([
        "--links", "aws-like-tls", "--tiers", "s3kv,s3kv-sse-c", "--ceilings", "",
        "--prompts", "32", "--block-tokens", "16", "--kv-bytes-per-token", "4096",
        "--rounds", "1", "--warmup", "0", "--first-byte-ms", "5", "--connection-mb-s", "50",
        "--no-freeze", "--force-loaded", "--json", str(out),
        "--chart", str(tmp_path / "prompt-load.png")]) == 0
    doc = json.loads(out.read_text())
    keyed = next(r for r in doc["rows"] if r["who"] == "s3kv-sse-c")
    assert keyed["blocks"] == 2 and keyed["requests"]["load"]["GET"] >= 2
    table = report.encryption(doc)
    assert "load s, SSE-C" in table and "| aws-like-tls | 32 |" in table
    from tests.servers.rgw import RGWServer

    def started(self: RGWServer) -> RGWServer:  # refused first: no server, no directory
        raise AssertionError("RGW started for a run that was to be refused")

    monkeypatch.setattr(RGWServer, "start", started)
    with pytest.raises(SystemExit, match="customer keys need TLS"):
        bench_prompt_load.main(["--links", "aws-like", "--tiers", "s3kv-sse-c", "--ceilings",
                                "", "--prompts", "32", "--block-tokens", "16",
                                "--kv-bytes-per-token", "4096", "--rounds", "1", "--warmup",
                                "0", "--force-loaded", "--json", str(out)])
