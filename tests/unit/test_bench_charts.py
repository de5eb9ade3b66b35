"""The committed charts redraw from their JSON; the shared chart helpers draw what they say."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"
sys.path.insert(0, str(ROOT / "bench"))

pytestmark = pytest.mark.unit


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.mark.parametrize(
    ("script", "name"),
    [
        ("bench_keys.py", "keys"),
        ("bench_transfer.py", "transfer-moto"),
        ("bench_transfer.py", "transfer-rgw-http"),
        ("bench_transfer.py", "transfer-rgw-https"),
        ("bench_vllm_tier.py", "vllm-tier"),
        ("bench_lookup_latency.py", "lookup-requests"),
    ],
)
def test_committed_chart_redraws_from_its_json(tmp_path: Path, script: str, name: str) -> None:
    out = tmp_path / f"{name}.png"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--redraw", str(IMG / f"{name}.json"),
         "--chart", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert png_size(out) == png_size(IMG / f"{name}.png")


def test_lines_draws_log_log_with_one_line_per_series(tmp_path: Path) -> None:
    import _charts

    fig, (ax,) = _charts.figure(title="t", footer="f", size=(6, 4))
    _charts.lines(
        ax,
        series={"s3kv": ([1, 10, 100], [1, 4, 7]), "naive": ([1, 10, 100], [1, 10, 100])},
        xlabel="chain length",
        ylabel="requests",
    )
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert [line.get_label() for line in ax.get_lines()] == ["s3kv", "naive"]
    assert png_size(_charts.save(fig, tmp_path / "l.png")) == (660, 440)
