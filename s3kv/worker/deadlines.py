"""One timer thread for many deadlines: a request's wait budget, a load's cancel."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("s3kv")


class Deadlines:
    """One thread that calls each function at its time (a few milliseconds late at most).

    What it calls must be quick: it posts a verdict or cancels a job.
    """

    def __init__(self, *, name: str = "s3kv-deadlines") -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def at(self, when: float, call: Callable[[], None]) -> None:
        """Call ``call`` once ``time.monotonic()`` reaches ``when``."""
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._order), call))
            self._cond.notify()

    def close(self) -> None:
        """Stop; what was still due is never called."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        _, _, call = heapq.heappop(self._heap)
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            try:
                call()
            except Exception:  # a caller's bug must not stop every other deadline
                logger.exception("s3kv: a deadline's call raised")
