"""Issue 20, point 6: progress with a total, percent, rate and an honest ETA; Ctrl-C.

The line is rendered from events into a fake stream with a fake clock (no TTY needed);
the library is checked to send "listing" events first, then work events whose totals are
the listing's; an interrupted command says what was done and how to resume (exit 130).
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import s3kv.progress
from s3kv.cli.progress import ProgressLine, render
from s3kv.ops.gc.collect import gc
from s3kv.ops.sync import sync
from s3kv.ops.verify import verify
from s3kv.progress import Progress
from s3kv.transfers.listing import SortedPresence
from tests.cli.day_two import BLOCK, bucket, cli, keys_in, namespace, s3, write_tree
from tests.faults.proxy import FaultProxy, slow_gets, slow_puts

pytestmark = pytest.mark.integration
__all__ = ["bucket", "s3"]  # fixtures used by name
MiB = 2**20


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_line_says_listing_then_total_percent_rate_and_eta() -> None:
    stream, clock = io.StringIO(), Clock()
    line = ProgressLine("push", stream=stream, enabled=True, clock=clock)
    line(Progress("listing", 1200, None, 1200 * MiB, None, seconds=0.5))
    assert stream.getvalue().endswith("push: listing... 1,200 blocks, 1.2 GiB so far")
    clock.now += 1
    line(Progress("copying", 300, 1200, 300 * MiB, 1200 * MiB, 300 * MiB, seconds=10.0))
    drawn = stream.getvalue().rsplit("\r\x1b[2K", 1)[1]
    assert drawn == (
        "push: copying 300/1,200 blocks (25%), 300.0 MiB/1.2 GiB, 30.0 MiB/s, ETA 30s"
    )
    assert "listing" not in drawn
    clock.now += 0.05  # sooner than the refresh: not drawn again
    line(Progress("copying", 310, 1200, 310 * MiB, 1200 * MiB, 310 * MiB, seconds=10.05))
    assert stream.getvalue().count("copying") == 1
    line.close()
    assert stream.getvalue().endswith("\r\x1b[2K")


def test_no_eta_without_a_total_nor_a_rate_in_a_dry_run() -> None:
    unknown = render("gc", Progress("deleting", 5000, None, 5 * MiB, None, 2 * MiB, 4.0))
    assert unknown == "gc: deleting 5,000 blocks, 5.0 MiB, 512.0 KiB/s"
    early = render("pull", Progress("copying", 1, 100, MiB, 100 * MiB, MiB, 0.2))
    assert early.endswith("ETA -")  # too early for an honest one
    dry = render("push", Progress("copying", 50, 100, 50, 100, 0, 2.0, dry_run=True))
    assert "/s" not in dry and "(50%)" in dry and "ETA 2s" in dry


def test_the_interrupt_message_says_what_was_done() -> None:
    line = ProgressLine("pull", stream=io.StringIO(), enabled=False)
    assert "interrupted while listing; nothing was changed. Go on" in line.interrupted("Go on")
    line(Progress("copying", 40, 160, 40 * BLOCK, 160 * BLOCK, 40 * BLOCK, 2.0))
    assert line.interrupted("Run it again.") == (
        "pull: interrupted after 40 of 160 blocks, 25% (160.0 KiB written) in 2.0s. "
        "Run it again."
    )


@pytest.fixture
def every_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3kv.progress, "EVENT_SECONDS", 0.0)


def test_sync_verify_and_gc_list_first_then_work_with_the_totals(
    tmp_path: Path, every_event: None
) -> None:
    src = tmp_path / "src"
    write_tree(src, namespace(), 6, ranks=2)
    events: list[Progress] = []
    report = sync(src, tmp_path / "dst", on_progress=events.append)
    assert report.copied == 12
    listing = [e for e in events if e.phase == "listing"]
    work = [e for e in events if e.phase == "copying"]
    assert listing and all(e.blocks_total is None for e in listing)
    assert events.index(listing[-1]) < events.index(work[0])  # all listing comes first
    assert {(e.blocks_total, e.bytes_total) for e in work} == {(12, 12 * BLOCK)}
    assert (work[-1].blocks_done, work[-1].bytes_done, work[-1].bytes_moved) == (
        12, 12 * BLOCK, 12 * BLOCK)  # fmt: skip

    events.clear()
    checked = verify(tmp_path / "dst", deep=True, on_progress=events.append)
    assert checked.blocks_read == 12
    reads = [e for e in events if e.phase == "checking"]
    assert reads and reads[-1].blocks_done == reads[-1].blocks_total == 12

    events.clear()
    freed = gc(tmp_path / "dst", max_bytes=6 * BLOCK, on_progress=events.append)
    assert freed.blocks_deleted == 6
    deletes = [e for e in events if e.phase == "deleting"]
    # Progress follows the deletes (issue 29): what is over budget is the total, and the
    # last line says what was freed, never a count of blocks listed.
    assert {e.bytes_total for e in deletes} == {6 * BLOCK}
    last = deletes[-1]
    assert (last.blocks_done, last.bytes_done, last.bytes_moved) == (6, 6 * BLOCK, 6 * BLOCK)
    assert all(e.blocks_done <= 6 for e in deletes)


def test_an_interrupted_sync_says_what_was_done_and_how_to_resume(
    capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    write_tree(src, namespace(), 30)
    real, seen = SortedPresence.size_of, []

    def interrupt(self: SortedPresence, relative: str) -> int | None:
        seen.append(relative)
        if len(seen) == 21:
            raise KeyboardInterrupt  # Ctrl-C while copying, in the main thread
        return real(self, relative)

    monkeypatch.setattr(SortedPresence, "size_of", interrupt)
    result = cli(capsys, "pull", str(src), str(tmp_path / "dst"), "--concurrency", "1", "--json")
    assert result.code == 130
    assert "pull: interrupted after" in result.err and "of 30 blocks" in result.err
    assert "Run the same command again to resume" in result.err
    error = result.json["error"]
    assert (error["code"], error["kind"]) == (130, "interrupted")
    done = int(result.err.split("interrupted after ")[1].split(" ")[0])
    assert 0 < done <= 20 and len(list((tmp_path / "dst").rglob("*.bin"))) >= done


def test_ctrl_c_on_a_real_push_exits_130_and_a_rerun_finishes(
    tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    src = tmp_path / "src"
    write_tree(src, namespace(), 300)
    url = f"s3://{bucket}/kv"
    with FaultProxy(moto_server, slow_puts, delay=0.02) as proxy:  # 300 PUTs: at least 6 s
        proc = subprocess.Popen(
            [sys.executable, "-m", "s3kv.cli", "push", str(src), url, "--endpoint-url",
             proxy.url, "--concurrency", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            # a test run started in the background (`make test &`) ignores SIGINT, and a
            # child inherits that: give the push the disposition a terminal's would have
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while len(keys_in(s3, bucket, "kv/")) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the push ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "push: interrupted after " in err and "of 300 blocks" in err
    stored = len([k for k in keys_in(s3, bucket, "kv/") if k.endswith(".bin")])
    rerun = subprocess.run(
        [sys.executable, "-m", "s3kv.cli", "push", str(src), url, "--endpoint-url",
         moto_server, "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    report = json.loads(rerun.stdout)
    assert rerun.returncode == 0 and report["already_present"] == stored
    assert report["copied"] == 300 - stored


def test_a_stopped_pull_sigterm_as_systemd_and_kubernetes_send_leaves_no_temp_file(
    tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    """SIGTERM ends a command as Ctrl-C does: the blocks in flight finish or are removed,
    exit 130 with how to resume (it killed the process at once, leaving temp files: 30 of
    them after a pull of 1,024 blocks stopped at 0.9 s)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, namespace(), 200)
    url = f"s3://{bucket}/kv"
    assert cli_push(src, url, moto_server).returncode == 0
    with FaultProxy(moto_server, slow_gets, delay=0.02) as proxy:  # 200 GETs: 4 s at 1
        proc = subprocess.Popen(
            [sys.executable, "-m", "s3kv.cli", "pull", url, str(dst), "--endpoint-url",
             proxy.url, "--concurrency", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while len(list(dst.rglob("*.bin"))) < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "the pull ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "pull: interrupted after " in err and "of 200 blocks" in err
    assert not list(dst.rglob("*.tmp"))
    rerun = subprocess.run(
        [sys.executable, "-m", "s3kv.cli", "pull", url, str(dst), "--endpoint-url",
         moto_server, "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    report = json.loads(rerun.stdout)
    assert rerun.returncode == 0 and report["copied"] + report["already_present"] == 200


def cli_push(src: Path, url: str, endpoint: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "s3kv.cli", "push", str(src), url, "--endpoint-url", endpoint],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
