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

import time
from collections.abc import Callable

from s3kv.errors import InvalidInputError

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
