"""Warnings an outage repeats, said once in a while, with how many were left unsaid.

At production rates a store that fails makes every job fail: thousands of lines a minute
would bury the one that says why. Each kind of line (a failed load, a failed store, the
breaker opening, ...) is logged at once the first time, then at most once per
:data:`QUIET_SECONDS`; the next line of that kind says how many were held back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

QUIET_SECONDS = 30.0
"""The shortest time between two lines of one kind."""

CHANGE_SECONDS = 10.0
"""The same for the lines that say the store's health changed (the breaker, the write
pause): each outage told, a flapping one a line per 10 s."""


class QuietLog:
    """A logger's lines, rate-limited per kind (thread-safe)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        every: float = QUIET_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()
        self._kinds: dict[str, tuple[float, int]] = {}  # kind -> (last said, held back)

    def log(
        self, level: int, kind: str, message: str, *args: object, every: float | None = None
    ) -> None:
        """Log it, unless a line of ``kind`` was logged less than ``every`` seconds ago
        (default: the logger's)."""
        now = self.clock()
        with self._lock:
            said, held = self._kinds.get(kind, (float("-inf"), 0))
            if now - said < (self.every if every is None else every):
                self._kinds[kind] = (said, held + 1)
                return
            self._kinds[kind] = (now, 0)
        if held:
            message += " (and %d more like it in the last %.0f s)"
            args = (*args, held, now - said)
        self.logger.log(level, message, *args)

    def warning(
        self, kind: str, message: str, *args: object, every: float | None = None
    ) -> None:
        self.log(logging.WARNING, kind, message, *args, every=every)

    def info(self, kind: str, message: str, *args: object, every: float | None = None) -> None:
        self.log(logging.INFO, kind, message, *args, every=every)
