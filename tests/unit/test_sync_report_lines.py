"""A sync's report on the terminal names the first failures and counts the rest."""

from __future__ import annotations

import pytest

from s3kv.cli.syncing import SHOWN, print_report
from s3kv.ops.sync_report import SyncReport

pytestmark = pytest.mark.unit


def report(failed: int) -> SyncReport:
    return SyncReport(
        source="s3://b/kv", destination="/mnt/kv", namespaces=(), copied=2,
        already_present=0, failed=failed, skipped=0, bytes=0, seconds=0.1, stray_keys=0,
        failures={f"k{i}.bin": "its local file: no space left on device" for i in range(failed)},
    )  # fmt: skip


def test_failures_past_the_shown_ones_are_counted_not_dropped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_report(report(SHOWN + 234))
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if line.startswith("failed: ")]) == SHOWN
    assert out[-1] == "... and 234 more failed (--json names up to 1,000 with why)"


def test_a_few_failures_are_all_named_and_nothing_more_is_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_report(report(3))
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[1].strip() for line in out] == ["k0.bin", "k1.bin", "k2.bin"]
