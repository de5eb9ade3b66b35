"""bench/lib/trust.py: no figures from a loaded machine unmarked, rounds that disagree marked;
and every benchmark script goes through it."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lib import transfer_report as _transfer_report
from bench.lib import trust as _trust

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit

SCRIPTS = sorted(p.stem for p in (ROOT / "bench").glob("bench_*.py"))


def args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    _trust.add_arguments(p)
    return p.parse_args(list(argv))


def test_a_loaded_machine_stops_the_run_with_a_message(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_trust, "load_average", lambda: 2.5)
    with pytest.raises(SystemExit) as stop:
        _trust.gate(args())
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "load average is 2.50, over 1" in err and "--force-loaded" in err


def test_force_loaded_records_and_marks_the_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_trust, "load_average", lambda: 2.5)
    record = _trust.gate(args("--force-loaded"))
    doc = _trust.stamp({"rows": []}, record)
    assert doc["loaded"] is True and doc["trust"]["load_average_1m"] == 2.5
    assert _trust.notes(doc)[0].startswith("LOADED MACHINE: 1-minute load average 2.5")


def test_a_quiet_machine_passes_unmarked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_trust, "load_average", lambda: 0.4)
    doc = _trust.stamp({}, _trust.gate(args()))
    assert doc["loaded"] is False and _trust.notes(doc) == []


def test_a_parent_s_measurement_stands_for_the_children(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_trust, "load_average", lambda: 7.0)  # the parent's servers
    assert _trust.gate(args("--start-load-average", "0.3"))["loaded"] is False


def test_rounds_more_than_20_percent_apart_disagree() -> None:
    row = _trust.mark({}, {"load_s": [1.0, 1.19, 1.1], "store_s": [1.0, 1.25]})
    assert row["disagree"] == ["store_s"]
    assert row["spread"] == {"load_s": 0.19, "store_s": 0.25}
    assert _trust.flag(row) == "†" and _trust.flag(_trust.mark({}, {"x": [1.0]})) == ""
    note = _trust.notes({"trust": {"spread_limit": 0.2}}, [row], lambda r: "the row")
    assert note == ["† rounds disagree by more than 20% (max/min - 1): the row (store_s)"]


def test_the_transfer_table_marks_a_row_whose_runs_disagree() -> None:
    def run(seconds: float) -> dict:
        return {"seconds": seconds, "cpu": 0.5}
    data = {"workloads": [("1 MiB", 64, 1 << 20)], "clients": ["s3kv", "awscrt"],
            "runs": {"1 MiB|upload|s3kv": [run(1.0), run(1.5), run(1.1)],
                     "1 MiB|upload|awscrt": [run(1.0), run(1.1), run(1.05)]}}
    summary = _transfer_report.summarize(data)
    ours, crt = summary["rows"][:2]
    assert ours["disagree"] == ["seconds"] and crt["disagree"] == []
    table = _transfer_report.render(
        summary, argparse.Namespace(concurrency=16, repeat=3), "moto",
        trust={"loaded": False, "trust": {"spread_limit": 0.2}})
    assert "| **s3kv**† |" in table and "| awscrt |" in table
    assert "1 MiB upload s3kv (seconds)" in table


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_refuses_a_loaded_machine_before_it_starts_anything(
        script: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"bench.{script}")
    monkeypatch.setattr(_trust, "load_average", lambda: 9.0)
    monkeypatch.setattr(sys, "argv", [f"{script}.py"])
    with pytest.raises(SystemExit) as stop:
        module.main([])
    assert stop.value.code == 2
    assert "over 1" in capsys.readouterr().err


def test_a_forced_run_says_loaded_in_its_json(tmp_path: Path) -> None:
    # A process of its own: bench_keys stubs vLLM's modules when vLLM is not installed.
    out = tmp_path / "keys.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_keys.py"), "--keys", "300", "--repeat",
         "2", "--json", str(out), "--force-loaded", "--start-load-average", "9"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED MACHINE: 1-minute load average 9" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["loaded"] is True and doc["trust"]["load_average_1m"] == 9.0
    assert all(len(r["keys_per_s_runs"]) == 2 and "disagree" in r for r in doc["rows"])


def test_wait_quiet_waits_for_the_load_to_fade(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = iter([3.0, 1.6, 0.8])
    monkeypatch.setattr(_trust, "load_average", lambda: next(loads))
    monkeypatch.setattr(_trust.time, "sleep", lambda s: None)
    assert _trust.gate(args("--wait-quiet", "60")) == {
        "load_average_1m": 0.8, "loaded": False, "load_limit": 1.0, "spread_limit": 0.2}
