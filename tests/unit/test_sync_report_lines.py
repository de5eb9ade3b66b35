"""A sync's report on the terminal names its failures: each block on its own line, or
one line for many blocks of one cause; past its lines, how many more failed."""

from __future__ import annotations

import pytest

from s3kv.cli.syncing import SHOWN, print_report
from s3kv.ops.sync_report import MAX_FAILURES_KEPT, SyncReport

pytestmark = pytest.mark.unit

ROOT = "/mnt/kv/m_0123456789ab_r0"


def report(failures: dict[str, str], failed: int | None = None) -> SyncReport:
    return SyncReport(
        source="s3://b/kv", destination="/mnt/kv", namespaces=(), copied=2,
        already_present=0, failed=len(failures) if failed is None else failed, skipped=0,
        bytes=0, seconds=0.1, stray_keys=0, failures=failures,
    )  # fmt: skip


def full_disk(i: int) -> tuple[str, str]:
    """A block and why it failed, as a pull into a full disk says it (its name inside)."""
    name = f"{i:064x}.bin"
    key = f"{ROOT}/{name[:3]}/{name[3:5]}_g0/{name}"
    why = (f"GET b/kv/m_0123456789ab_r0/{name[:3]}/{name[3:5]}_g0/{name}: its local file: "
           "no space left on device; free space, then run it again (AWS_ERROR_NO_SPACE)")
    return key, why


def lines(capsys: pytest.CaptureFixture[str], r: SyncReport) -> list[str]:
    print_report(r)
    return capsys.readouterr().out.splitlines()


def test_blocks_of_one_cause_share_a_line_that_says_how_many(
    capsys: pytest.CaptureFixture[str],
) -> None:
    failures = dict(full_disk(i) for i in range(254))
    out = lines(capsys, report(failures))
    first = next(iter(failures))
    assert out == [
        "failed: 254 blocks, one cause: GET <block>: its local file: no space left on "
        "device; free space, then run it again (AWS_ERROR_NO_SPACE) (the first: "
        f"{first})"
    ]


def test_failures_past_those_kept_are_counted_not_dropped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    failures = dict(full_disk(i) for i in range(MAX_FAILURES_KEPT))
    out = lines(capsys, report(failures, failed=MAX_FAILURES_KEPT + 234))
    assert out[0].startswith(f"failed: {MAX_FAILURES_KEPT:,} blocks, one cause: GET <block>")
    assert out[-1] == "... and 234 more failed (--json names up to 1,000 with why)"


def test_past_the_shown_lines_the_rest_are_counted(capsys: pytest.CaptureFixture[str]) -> None:
    failures = {f"{ROOT}/k{i}.bin": f"cause number {i}" for i in range(SHOWN + 5)}
    failures.update(full_disk(i) for i in range(3))  # a cause seen after the shown ones
    out = lines(capsys, report(failures))
    assert len([line for line in out if line.startswith("failed: ")]) == SHOWN
    assert out[-1] == "... and 8 more failed (--json names up to 1,000 with why)"


def test_a_few_failures_are_all_named_and_nothing_more_is_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    failures = {f"{ROOT}/k{i}.bin": f"GET b/kv/k{i}.bin: answered {500 + i}" for i in range(3)}
    out = lines(capsys, report(failures))
    assert out == [f"failed: {key}: {why}" for key, why in failures.items()]


def test_what_retrying_took_does_not_split_a_cause(capsys: pytest.CaptureFixture[str]) -> None:
    failures = {f"{ROOT}/k{i}.bin": f"GET b/kv/k{i}.bin: answered 503 SlowDown (gave up after "
                f"8 attempts in {i + 1.5}s)" for i in range(5)}
    failures[f"{ROOT}/x.bin"] = "GET b/kv/x.bin: answered 500 (gave up after 8 attempts in 9s)"
    out = lines(capsys, report(failures))
    assert out == [
        "failed: 5 blocks, one cause: GET <block>: answered 503 SlowDown (gave up after 8 "
        f"attempts in 1.5s) (the first: {ROOT}/k0.bin)",
        f"failed: {ROOT}/x.bin: GET b/kv/x.bin: answered 500 (gave up after 8 attempts in 9s)",
    ]
