"""When renewals run: a spread start, a budget per chain and in all, one pause for all.

:class:`s3kv.ops.gc.renewal.Renewer` decides *what* to renew; this queue decides *when*, so that
renewal stays background work that a fleet can afford:

* **Spread.** Each queued key waits a random 0 to ``spread`` seconds before it is
  looked at. Nodes that load the same chain at the same moment then look at each block
  at different instants, and the later look sees the earlier node's renewal (a copy
  moves Last-Modified) instead of copying again.
* **Budgets.** At most ``concurrency`` keys are worked on at once over every chain, and
  at most ``chain_budget`` of one chain (a long chain never holds every slot), so 1,000
  due blocks drain in a few seconds, not one copy after another.
* **One pause for all.** A throttled or failed request (503 SlowDown, a timeout) pauses
  every renewal of this node, 1 s, then twice as long each time up to a minute (or as
  long as the store's ``Retry-After`` asks), until a request succeeds: a store that
  answers SlowDown sees a few requests a minute from this node, not thousands.
* **Never twice.** A key is queued at most once until it is done (:meth:`pending`).

Bounded: at most ``max_pending`` keys wait (the caller drops and counts the rest).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from s3kv.retry import JITTER

PAUSE_FIRST_SECONDS = 1.0
PAUSE_MAX_SECONDS = 60.0


@dataclass(slots=True)
class Task:
    """One key to look at (and renew or re-tag), with what the caller knew."""

    key: str
    chain: int
    """The use it came with: the unit of the per-chain budget."""
    payload: Any = None
    attempts: int = 0
    ready_at: float = field(default=0.0, compare=False)


class RenewalQueue:
    """Tasks for ``concurrency`` worker threads that run ``work(task)``, which returns True
    when it queued the task again (:meth:`retry`). See the module."""

    def __init__(
        self,
        work: Callable[[Task], bool],
        *,
        concurrency: int,
        chain_budget: int,
        spread: float,
        max_pending: int,
        name: str = "s3kv_renew",
    ) -> None:
        self._work = work
        self.chain_budget = max(1, chain_budget)
        self.spread = max(0.0, spread)
        self.max_pending = max_pending
        self.pauses = 0
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int, Task]] = []
        self._parked: defaultdict[int, list[Task]] = defaultdict(list)
        self._pending: set[str] = set()
        self._chain_busy: Counter[int] = Counter()
        self._busy = 0
        self._seq = itertools.count()
        self._chains = itertools.count()
        self._pause_until = 0.0
        self._backoff = 0.0
        self._closing = False
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}_{i}", daemon=True)
            for i in range(max(1, concurrency))
        ]
        for thread in self._threads:
            thread.start()

    # -- callers ---------------------------------------------------------------------------

    def pending(self, key: str) -> bool:
        """Whether ``key`` waits or is being worked on."""
        with self._lock:
            return key in self._pending

    def push(self, keys: Sequence[tuple[str, Any]]) -> int | None:
        """Queue ``(key, payload)`` pairs of one use as one chain; keys already pending
        are left out. Returns how many were queued; None when they do not all fit."""
        now = time.monotonic()
        with self._lock:
            if self._closing:
                return 0
            fresh = [(k, p) for k, p in keys if k not in self._pending]
            if len(self._pending) + len(fresh) > self.max_pending:
                return None
            chain = next(self._chains)
            for key, payload in fresh:
                ready = now + JITTER.uniform(0, self.spread)
                self._pending.add(key)
                task = Task(key, chain, payload, ready_at=ready)
                heapq.heappush(self._heap, (ready, next(self._seq), task))
            if fresh:
                self._lock.notify_all()
            return len(fresh)

    def retry(self, task: Task) -> None:
        """Queue a task again (after :meth:`pause`); it stays pending."""
        with self._lock:
            task.attempts += 1
            task.ready_at = max(time.monotonic(), self._pause_until)
            heapq.heappush(self._heap, (task.ready_at, next(self._seq), task))
            self._lock.notify_all()

    def pause(self, retry_after: float | None = None) -> float:
        """A request was throttled or failed: every worker waits (see the module).
        Returns the pause in seconds."""
        with self._lock:
            self._backoff = min(PAUSE_MAX_SECONDS, max(PAUSE_FIRST_SECONDS, 2 * self._backoff))
            wait = max(self._backoff * JITTER.uniform(0.75, 1.0), retry_after or 0.0)
            self._pause_until = max(self._pause_until, time.monotonic() + wait)
            self.pauses += 1
            return wait

    def succeeded(self) -> None:
        """A request succeeded: the next failure pauses for the shortest time again."""
        if self._backoff:
            with self._lock:
                self._backoff = 0.0

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until nothing waits or runs; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._pending, timeout)

    def clear(self) -> None:
        """Drop everything that waits (what runs finishes)."""
        with self._lock:
            for _, _, task in self._heap:
                self._pending.discard(task.key)
            for parked in self._parked.values():
                self._pending.difference_update(t.key for t in parked)
            self._heap.clear()
            self._parked.clear()
            self._lock.notify_all()

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._closing = True
        self.clear()
        with self._lock:
            self._lock.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- workers ---------------------------------------------------------------------------

    def _next(self) -> Task | None:
        with self._lock:
            while True:
                if self._closing:
                    return None
                now = time.monotonic()
                if self._pause_until > now:
                    self._lock.wait(self._pause_until - now)
                    continue
                if not self._heap:
                    self._lock.wait()
                    continue
                ready, _, task = self._heap[0]
                if ready > now:
                    self._lock.wait(ready - now)
                    continue
                heapq.heappop(self._heap)
                if self._chain_busy[task.chain] >= self.chain_budget:
                    self._parked[task.chain].append(task)  # back when the chain has room
                    continue
                self._chain_busy[task.chain] += 1
                self._busy += 1
                return task

    def _run(self) -> None:
        while True:
            task = self._next()
            if task is None:
                return
            requeued = False
            try:
                requeued = bool(self._work(task))
            finally:
                self._finish(task, requeued)

    def _finish(self, task: Task, requeued: bool) -> None:
        with self._lock:
            self._busy -= 1
            self._chain_busy[task.chain] -= 1
            if not self._chain_busy[task.chain]:
                del self._chain_busy[task.chain]
            parked = self._parked.get(task.chain)
            if parked:
                waiting = parked.pop(0)
                heapq.heappush(self._heap, (waiting.ready_at, next(self._seq), waiting))
                if not parked:
                    del self._parked[task.chain]
            if not requeued:
                self._pending.discard(task.key)
            self._lock.notify_all()
