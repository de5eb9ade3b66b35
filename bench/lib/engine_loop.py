"""A stand-in for vLLM's EngineCore loop, run beside a tier's load job.

vLLM runs its offloading tiers inside the EngineCore process, beside the scheduler: a
tier whose threads take the GIL back often (per network chunk, per TLS record) slows
every step of that loop. Each step here is what a scheduler step costs the interpreter:
a fixed amount of Python work (calibrated once to about ``WORK_SECONDS`` on this machine
with nothing else running), a wait that releases the GIL (``WAIT_SECONDS``, as for the
model's forward pass), and one poll of the tier (``get_finished_jobs``). Under contention
the same work takes longer, so a loop that keeps fewer steps per second during a load is
a loop the tier slowed.

The loop's own CPU (its Python work) is measured per thread, so a load's CPU per GiB can
leave it out.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WORK_SECONDS = 0.002
WAIT_SECONDS = 0.0015
_iterations = 0


def set_work(seconds: float) -> None:
    """The Python work per step from now on (the next step calibrates it afresh)."""
    global WORK_SECONDS, _iterations
    WORK_SECONDS, _iterations = seconds, 0


def calibrate() -> int:
    """Iterations of :func:`work` that take ``WORK_SECONDS`` here, alone (once)."""
    global _iterations
    if _iterations:
        return _iterations
    n = 1000
    while True:
        t0 = time.perf_counter()
        work(n)
        took = time.perf_counter() - t0
        if took > 0.02:
            break
        n *= 2
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        work(n)
        runs.append(time.perf_counter() - t0)
    _iterations = max(1, int(n * WORK_SECONDS / statistics.median(runs)))
    return _iterations


def work(n: int) -> int:
    """Python work of the kind a scheduler step does: small dicts, lists, attribute-free
    arithmetic, all under the GIL."""
    seen: dict[int, int] = {}
    total = 0
    for i in range(n):
        seen[i & 255] = seen.get(i & 255, 0) + i
        total += i % 7
    return total + len(seen)


@dataclass
class Steps:
    """What the loop did over one stretch: step times (seconds) and its own CPU."""

    seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)
    work_cpu_seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return len(self.step_seconds) / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        s = sorted(self.step_seconds)
        if not s:
            return {"steps_per_s": 0.0}
        return {
            "steps_per_s": round(self.per_second, 1),
            "step_ms_p50": round(1000 * s[len(s) // 2], 3),
            "step_ms_p90": round(1000 * s[min(len(s) - 1, int(0.9 * len(s)))], 3),
            "step_ms_p99": round(1000 * s[min(len(s) - 1, int(0.99 * len(s)))], 3),
            "step_ms_max": round(1000 * s[-1], 3),
        }


def run_until(poll: Callable[[], bool], *, limit_seconds: float = 600.0) -> Steps:
    """Step until ``poll()`` (called once per step, after the wait) returns True."""
    n = calibrate()
    steps = Steps()
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        c0 = time.thread_time()
        work(n)
        steps.work_cpu_seconds += time.thread_time() - c0
        time.sleep(WAIT_SECONDS)
        finished = poll()
        steps.step_seconds.append(time.perf_counter() - t0)
        if finished or t0 - start > limit_seconds:
            steps.seconds = time.perf_counter() - start
            return steps


def idle(seconds: float) -> Steps:
    """The loop with no load beside it, for ``seconds``."""
    until = time.perf_counter() + seconds
    return run_until(lambda: time.perf_counter() >= until)
