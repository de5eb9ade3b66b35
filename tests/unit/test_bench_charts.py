"""Charts: the committed ones redraw from their JSON; every chart says how it was measured.

The docs show only charts whose JSON was recorded on a quiet machine (docs/img, see
test_doc_figures.py); until the coordinator's quiet run writes them, the redraw tests
skip as pending, and the chart functions are checked on made-up fixtures instead.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit import bench_fixtures

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"

pytestmark = pytest.mark.unit

# The charts the docs show (scripts/doc_figures.py), and the script that redraws each.
REDRAW = {
    "prompt-load": ["bench_prompt_load.py", "--redraw"],
    "prompt-load-sse-c": ["bench_prompt_load.py", "--redraw"],
    "ttft": ["bench_ttft.py", "--redraw"],
    "lookup-requests": ["bench_lookup_latency.py", "--redraw"],
    "transfer-rgw-http": ["bench_transfer.py", "--redraw"],
    "transfer-rgw-https": ["bench_transfer.py", "--redraw"],
}


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def test_every_chart_a_doc_shows_has_a_redraw_command() -> None:
    from scripts import doc_figures

    assert {n for n, s in doc_figures.SOURCES.items() if s.chart} == set(REDRAW)


@pytest.mark.parametrize("name", sorted(REDRAW))
def test_committed_chart_redraws_from_its_json(tmp_path: Path, name: str) -> None:
    if not (IMG / f"{name}.json").exists():
        pytest.skip(f"docs/img/{name}.json pending a quiet-machine run")
    script, flag = REDRAW[name]
    out = tmp_path / f"{name}.png"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), flag, str(IMG / f"{name}.json"),
         "--chart", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert png_size(out) == png_size(IMG / f"{name}.png")


def footer_of(monkeypatch: pytest.MonkeyPatch, draw: Any) -> str:
    """Draw a chart with save() intercepted; the footer text of the figure it built."""
    from scripts import charts

    seen: list[Any] = []
    monkeypatch.setattr(charts, "save", lambda fig, path, **kw: seen.append(fig) or path)
    draw()
    (fig,) = seen
    footer: str = fig.s3kv_footer
    charts.pyplot().close(fig)
    return footer


def test_prompt_load_chart_draws_every_link_and_prompt(tmp_path: Path) -> None:
    from bench.lib import prompt_report

    out = prompt_report.chart(bench_fixtures.prompt_load(), tmp_path / "p.png")
    width, height = png_size(out)
    assert width > height > 600  # 2 links x 2 prompts of panels


def test_chart_footers_say_loaded_and_name_rows_that_disagree(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import bench_ttft
    from bench.lib import prompt_report

    doc = bench_fixtures.prompt_load(loaded=True)
    doc["rows"][1]["disagree"] = ["load_s"]
    footer = footer_of(monkeypatch, lambda: prompt_report.chart(doc, tmp_path / "p.png"))
    assert "LOADED MACHINE: 1-minute load average 3.5" in footer
    assert "† rounds disagree by more than 20%" in footer
    assert "rgw-http 3,072/2 MiB vllm-obj (load_s)" in footer
    quiet = footer_of(monkeypatch, lambda: prompt_report.chart(
        bench_fixtures.prompt_load(), tmp_path / "q.png"))
    assert "LOADED" not in quiet and "†" not in quiet
    ttft = bench_fixtures.ttft(loaded=True)
    assert "LOADED MACHINE" in footer_of(
        monkeypatch, lambda: bench_ttft.chart(ttft, tmp_path / "t.png"))


def test_ttft_chart_and_table_from_a_fixture(tmp_path: Path) -> None:
    from bench import bench_ttft

    doc = bench_fixtures.ttft()
    assert png_size(bench_ttft.chart(doc, tmp_path / "t.png")) == (990, 605)
    table = bench_ttft.markdown(doc)
    assert "| S3 hit: s3kv, Ceph RGW | 0.50 | 0.45 | 0.55 | 4.0x |" in table


def test_lines_draws_log_log_with_one_line_per_series(tmp_path: Path) -> None:
    from scripts import charts

    fig, (ax,) = charts.figure(title="t", footer="f", size=(6, 4))
    charts.lines(
        ax,
        series={"s3kv": ([1, 10, 100], [1, 4, 7]), "naive": ([1, 10, 100], [1, 10, 100])},
        xlabel="chain length",
        ylabel="requests",
    )
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert [line.get_label() for line in ax.get_lines()] == ["s3kv", "naive"]
    assert png_size(charts.save(fig, tmp_path / "l.png")) == (660, 440)


def test_grouped_bars_draw_the_min_max_range_around_each_median() -> None:
    from scripts import charts

    fig, (ax,) = charts.figure(title="t", footer="f", size=(6, 4))
    charts.grouped_bars(ax, groups=["a"], series={"s3kv": [2.0], "other": [3.0]},
                         ranges={"s3kv": [(1.5, 2.5)], "other": [None]}, ylabel="s")
    (caps,) = [c for c in ax.containers if getattr(c, "has_yerr", False)]
    segments = caps.lines[2][0].get_segments()
    assert [(round(s[0][1], 2), round(s[1][1], 2)) for s in segments] == [(1.5, 2.5)]
    charts.pyplot().close(fig)
