"""bench/bench_renewal.py, the instrument issue 21's renewal-cost figure comes from, at a
tiny size on moto's server: both tiers load every block (checked byte for byte by the
benchmark), only `on` copies, and the docs' table is rendered from its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm]


def test_the_renewal_benchmark_renews_only_with_renewal_on(tmp_path: Path) -> None:
    from bench import bench_renewal

    out = tmp_path / "renewal.json"
    assert bench_renewal.main(["--servers", "moto", "--runs", "2", "--job-mib", "2",
                               "--block-kib", "256", "--force-loaded",
                               "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    (row,) = doc["rows"]
    blocks = 2 * 1024 // 256
    assert row["off"]["renewed"] == 0
    # every measured load of `on` made its blocks due: one copy per block loaded, at most
    assert blocks <= row["on"]["renewed"] <= 3 * blocks
    assert row["on"]["renewal_failures"] == 0
    assert row["ratio"] == pytest.approx(row["on"]["load_mib_s"] / row["off"]["load_mib_s"])
    table = bench_renewal.markdown(doc)
    assert "| moto |" in table and f"{row['ratio']:.3f}" in table


def test_the_drain_benchmark_counts_copies_per_block_and_drain_time(tmp_path: Path) -> None:
    """--drain at a tiny size (the figure is taken at 1,000 blocks on a quiet machine)."""
    from bench import bench_renewal

    out = tmp_path / "renewal-drain.json"
    assert bench_renewal.main(["--servers", "moto", "--drain", "24", "--drain-block-kib", "16",
                               "--drain-renew-after", "4", "--force-loaded",
                               "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    one, two = doc["drain"]
    assert (one["scenario"], two["scenario"]) == ("one tier, two loads", "two tiers at once")
    for row in (one, two):
        assert row["blocks"] == 24 and row["failed"] == 0 and row["drain_s"] > 0
        assert row["renewed"] + row["already_renewed"] >= 24  # every block renewed or seen
    # two loads in a row: one copy per block. Two tiers at once: at most two (moto
    # enforces no copy condition, and renew_after 4 s spreads the looks over 0.4 s only:
    # the figure comes from RGW at the production spread, 10 s)
    assert one["copies"] == 24 and one["copies_per_block"] == 1.0
    assert 24 <= two["copies"] < 2 * 24
    table = bench_renewal.markdown(doc)
    assert "| moto | two tiers at once |" in table and "copies per block" in table
