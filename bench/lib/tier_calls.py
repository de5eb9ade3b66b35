"""A vLLM tier's calls as the scheduler makes them, each timed (bench_vllm_tier.py,
bench_renewal.py and the prompt loads of prompt_run.py)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

CALLS = ("lookup", "on_schedule_end", "submit_store", "submit_load", "get_finished_jobs")
"""The tier's calls whose times a result reports."""


class Timer:
    """``timer(name, fn, *args)`` calls ``fn(*args)`` and keeps its microseconds by name."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)

    def __call__(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter_ns()
        out = fn(*args)
        self.samples[name].append((time.perf_counter_ns() - t0) / 1000)
        return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds() -> float:
    return time.process_time()  # this process, every thread, nanosecond clock


def lookup_absent(timer: Timer, tier: Any, keys: Sequence[Any], req_id: str) -> Any:
    """Look up keys the tier does not hold, stepping like the scheduler until no key answers
    RETRY (the tier's background lookup answered), then finish the request; its context."""
    from vllm.v1.kv_offload.base import LookupResult, ReqContext

    from tests.vllm import harness as h

    ctx = ReqContext(req_id=req_id)
    while True:
        answers = [timer("lookup", tier.lookup, k, ctx) for k in keys]
        timer("on_schedule_end", tier.on_schedule_end, h.END)
        if LookupResult.RETRY not in answers:
            break
        time.sleep(0.001)
    tier.on_request_finished(ctx)
    return ctx
