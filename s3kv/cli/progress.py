"""Progress on a terminal (stderr), the final summary line, and what Ctrl-C says.

While a command lists, the line says ``listing...`` and counts; once the totals are
known it shows done/total, percent, bytes, the rate and an ETA from the rate so far (a
dry run moves nothing: no rate). Nothing is drawn when stderr is no terminal. Every
command ends with one summary line: on stdout, or on stderr with ``--json`` so stdout
stays machine-readable. On Ctrl-C the last progress seen says what was done, and the
command says how to resume (exit 130).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from s3kv.errors import plural
from s3kv.progress import Progress
from s3kv.units import format_bytes

REFRESH_SECONDS = 0.2
MIN_ETA_SECONDS = 1.0
"""No ETA before this much of a phase has passed: a rate from a few blocks misleads."""


class Interrupted(Exception):
    """Ctrl-C during a command; the message says what was done and how to resume."""


class ProgressLine:
    """A one-line, self-overwriting progress display; it only keeps the last event when
    drawing is off (no TTY), so an interrupt can still say what was done."""

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.clock = clock
        self.last: Progress | None = None
        self._drawn_at = -REFRESH_SECONDS
        self._lock = threading.Lock()
        self._shown = False

    def __call__(self, p: Progress) -> None:
        with self._lock:
            last = self.last
            if last is not None and last.phase == p.phase and p.blocks_done < last.blocks_done:
                return  # an older event that lost a race between worker threads
            self.last = p
            if not self.enabled:
                return
            now = self.clock()
            changed = last is None or last.phase != p.phase
            if not changed and now - self._drawn_at < REFRESH_SECONDS:
                return
            self._drawn_at = now
            self.stream.write("\r\x1b[2K" + render(self.label, p))
            self.stream.flush()
            self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._shown = False

    def interrupted(self, resume: str) -> str:
        """What to say on Ctrl-C: what was done, then how to resume."""
        p = self.last
        if p is None or p.phase == "listing":
            counted = f" ({plural(p.blocks_done, 'block')} counted)" if p is not None else ""
            return (
                f"{self.label}: interrupted while listing{counted}; nothing was changed. "
                + resume
            )
        of = f" of {p.blocks_total:,}" if p.blocks_total is not None else ""
        share = percent(p)
        pct = f", {share:.0f}%" if share is not None else ""
        return (
            f"{self.label}: interrupted after {p.blocks_done:,}{of} blocks{pct} "
            f"({format_bytes(p.bytes_moved)} {_MOVED[p.phase]}) in {p.seconds:.1f}s. {resume}"
        )


_MOVED = {
    "listing": "listed",
    "copying": "written",
    "checking": "read",
    "deleting": "freed",
    "repairing": "written",
}


def percent(p: Progress) -> float | None:
    """How far through the phase, by bytes where they are known, else by blocks."""
    if p.bytes_total:
        return min(100.0, 100.0 * p.bytes_done / p.bytes_total)
    if p.blocks_total:
        return min(100.0, 100.0 * p.blocks_done / p.blocks_total)
    if p.blocks_total == 0:
        return 100.0
    return None


def eta_seconds(p: Progress) -> float | None:
    """Seconds left at the rate so far; None while the total is unknown or too early."""
    share = percent(p)
    if share is None or share <= 0 or p.seconds < MIN_ETA_SECONDS:
        return None
    return p.seconds * (100.0 - share) / share


def format_eta(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def render(label: str, p: Progress) -> str:
    """One progress line (no terminal codes)."""
    if p.phase == "listing":
        return (
            f"{label}: listing... {plural(p.blocks_done, 'block')}, "
            f"{format_bytes(p.bytes_done)} so far"
        )
    parts = [f"{label}: {p.phase}"]
    share = percent(p)
    if p.blocks_total is not None:
        parts.append(f"{p.blocks_done:,}/{p.blocks_total:,} blocks ({share or 0:.0f}%)")
        if p.bytes_total:
            parts.append(f"{format_bytes(p.bytes_done)}/{format_bytes(p.bytes_total)}")
    else:
        parts.append(f"{plural(p.blocks_done, 'block')}, {format_bytes(p.bytes_done)}")
    if not p.dry_run:
        rate = p.bytes_moved / p.seconds if p.seconds > 0 else 0.0
        parts.append(f"{format_bytes(rate)}/s")
    eta = eta_seconds(p)
    if eta is not None:
        parts.append(f"ETA {format_eta(eta)}")
    elif p.blocks_total is not None:
        parts.append("ETA -")
    return " ".join(parts[:2]) + (", " + ", ".join(parts[2:]) if parts[2:] else "")


@contextmanager
def watching(label: str, *, resume: str, stream: TextIO | None = None) -> Iterator[ProgressLine]:
    """A progress line for the duration of a command; Ctrl-C becomes :class:`Interrupted`
    with what was done and ``resume`` (how to carry on)."""
    line = ProgressLine(label, stream=stream)
    try:
        yield line
    except KeyboardInterrupt:
        line.close()
        raise Interrupted(line.interrupted(resume)) from None
    finally:
        line.close()


def summary(line: str, *, json_mode: bool) -> None:
    """The command's last line: stdout normally, stderr under ``--json``."""
    print(line, file=sys.stderr if json_mode else sys.stdout)
