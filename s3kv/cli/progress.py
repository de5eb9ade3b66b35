"""Progress on a terminal (blocks, bytes, rate, ETA on stderr), silence otherwise.

Every command ends with one summary line: on stdout, or on stderr with ``--json`` so
stdout stays machine-readable.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from s3kv.cli.units import format_bytes
from s3kv.sync import SyncProgress

REFRESH_SECONDS = 0.2


class Progress:
    """A one-line, self-overwriting progress display; a no-op when stderr is no TTY."""

    def __init__(self, label: str, *, stream: TextIO | None = None, enabled: bool | None = None):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._last = 0.0
        self._lock = threading.Lock()
        self._shown = False

    def __call__(self, p: SyncProgress) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._last < REFRESH_SECONDS and not p.listing_done:
                return
            self._last = now
            rate = p.bytes / p.seconds if p.seconds > 0 else 0.0
            line = f"{self.label}: {p.blocks_done} blocks, {format_bytes(p.bytes)}, "
            line += f"{format_bytes(rate)}/s"
            if p.listing_done or p.blocks_listed == p.blocks_done:
                eta = ""
            else:
                per_block = p.seconds / p.blocks_done if p.blocks_done else 0.0
                eta = f", ETA {per_block * (p.blocks_listed - p.blocks_done):.0f}s (listing...)"
            self.stream.write("\r\x1b[2K" + line + eta)
            self.stream.flush()
            self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()


def summary(line: str, *, json_mode: bool) -> None:
    """The command's last line: stdout normally, stderr under ``--json``."""
    print(line, file=sys.stderr if json_mode else sys.stdout)
