"""What a request may wait for the store: its budget, and the clock that enforces it.

A request's lookups and its load are bounded together by ``wait_budget_seconds``
(:data:`DEFAULT_WAIT_BUDGET_SECONDS`), counted from the tier's first ``lookup`` for the
request, not by the transfer's deadline (120 s by default): past it, recomputing the
prompt is cheaper than waiting. Lookups still unanswered then answer MISS
(:mod:`s3kv.vllm._lookup`); a load still running is cancelled and its blocks recomputed
(:mod:`s3kv.vllm._runner`). Both count as a failure of the store
(:mod:`s3kv.vllm._health`).

The default, 2.5 s, and what it rests on (healthy loads and recomputes measured here):
docs/vllm-tier.md, "On a bad day".
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from s3kv.errors import InvalidInputError

logger = logging.getLogger("s3kv.vllm")

DEFAULT_WAIT_BUDGET_SECONDS = 2.5
"""What a request's lookups and load may take together, by default (see the module)."""


def parse_budget(value: object) -> float:
    """The tier entry's ``wait_budget_seconds``: a positive number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidInputError(
            f"wait_budget_seconds {value!r} is not a positive number of seconds; give e.g. "
            f"{DEFAULT_WAIT_BUDGET_SECONDS} (what a request may wait for the store before "
            "it is recomputed instead)"
        )
    return float(value)


class WaitBudget:
    """Each request's deadline: its first lookup plus the budget.

    ``start`` runs on vLLM's scheduler thread; ``deadline`` on the lookup and dispatch
    threads (a dict read: atomic). A request's clock stops with :meth:`forget` (its load
    finished, or the request did), so a request looked up again later (preempted, then
    scheduled anew) gets a new budget.
    """

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self._started: dict[str, float] = {}

    def start(self, req_id: str) -> None:
        if req_id not in self._started:
            self._started[req_id] = self.clock()

    def deadline(self, req_id: str) -> float:
        """When the request's waiting must end (from now, for a request not started)."""
        return self._started.get(req_id, self.clock()) + self.seconds

    def left(self, req_id: str) -> float:
        return self.deadline(req_id) - self.clock()

    def forget(self, req_id: str) -> None:
        self._started.pop(req_id, None)


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
                logger.exception("s3kv tier: a deadline's call raised")
