"""Where a running command is: the events ``on_progress`` callbacks receive.

Commands that move or read blocks (``sync``, ``verify``, ``gc``, ``repair``) first list
their location (phase ``"listing"``: the totals grow as keys are counted), then work
through what they listed with the totals known, so a display can show a percent and an
honest ETA. ``bytes_moved`` is what crossed the wire (copied, read, freed); ``bytes_done``
is the part of ``bytes_total`` dealt with, moved or not (a block already present counts).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Phase = Literal["listing", "copying", "checking", "deleting", "repairing"]
EVENT_SECONDS = 0.1
"""At most one event per this many seconds within a phase (the first and last always)."""


@dataclass(frozen=True, slots=True)
class Progress:
    """One snapshot of a running command."""

    phase: Phase
    blocks_done: int
    blocks_total: int | None
    """None while the listing that counts them is still running."""
    bytes_done: int
    bytes_total: int | None
    bytes_moved: int = 0
    seconds: float = 0.0
    """Since this phase started."""
    dry_run: bool = False


ProgressCallback = Callable[[Progress], None]


class Meter:
    """Counts a command's work and sends :class:`Progress` events, thread-safely and at
    most every :data:`EVENT_SECONDS` (a callback per listed key would cost more than
    the listing)."""

    def __init__(
        self,
        callback: ProgressCallback | None,
        *,
        dry_run: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.callback = callback
        self.dry_run = dry_run
        self.clock = clock
        self.lock = threading.Lock()
        self.phase: Phase = "listing"
        self.blocks = self.nbytes = self.moved = 0
        self.blocks_total: int | None = None
        self.bytes_total: int | None = None
        self.started = self.sent = clock()

    def start(self, phase: Phase, *, blocks: int | None = None, nbytes: int | None = None) -> None:
        """Begin a phase; the totals are known (work) or not (a listing)."""
        with self.lock:
            self.phase, self.blocks_total, self.bytes_total = phase, blocks, nbytes
            self.blocks = self.nbytes = self.moved = 0
            self.started = self.clock()
        self._send(force=True)

    def add(self, blocks: int = 1, nbytes: int = 0, moved: int = 0) -> None:
        with self.lock:
            self.blocks += blocks
            self.nbytes += nbytes
            self.moved += moved
        self._send(force=False)

    def finish(self) -> None:
        self._send(force=True)

    def _send(self, *, force: bool) -> None:
        if self.callback is None:
            return
        now = self.clock()
        with self.lock:
            if not force and now - self.sent < EVENT_SECONDS:
                return
            self.sent = now
            event = Progress(
                self.phase,
                self.blocks,
                self.blocks_total,
                self.nbytes,
                self.bytes_total,
                self.moved,
                now - self.started,
                self.dry_run,
            )
        self.callback(event)
