"""vLLM 0.33.0's own scheduler lookup loop, driven against one tier (no engine, no GPU).

``OffloadingConnectorScheduler._maximal_prefix_lookup`` (in
``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``) is called
unbound on a stand-in that has the only two attributes it reads: ``manager`` (here the
tier itself, which answers ``lookup`` with the same ``LookupResult`` contract) and
``_events_tracker``. Each step looks up every unresolved request's chain, then ends the
step (``on_schedule_end``, which flushes the tier's lookup batch), as vLLM's scheduler
does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
)
from vllm.v1.kv_offload.base import OffloadKey, ReqContext
from vllm.v1.kv_offload.tiering.base import ScheduleEndContext

END = ScheduleEndContext(new_req_ids=[], preempted_req_ids=())


class _NoEvents:
    def record_lookup(self, *args: Any) -> None:
        """KV events are off."""


@dataclass
class _Scheduler:
    manager: Any
    _events_tracker: _NoEvents


@dataclass
class Verdict:
    hits: int
    steps: int
    seconds: float  # from the first lookup call to the step that returned the verdict


def request(req_id: str, keys: Sequence[OffloadKey], tokens_per_chunk: int = 16) -> ReqContext:
    """A request context holding each key's end-token position, as vLLM records it
    (``RequestOffloadState.update_offload_keys``)."""
    ctx = ReqContext(req_id=req_id)
    for i, key in enumerate(keys):
        ctx.set_offload_key_position(key, (i + 1) * tokens_per_chunk)
    return ctx


def verdicts(
    tier: Any,
    chains: Mapping[str, Sequence[OffloadKey]],
    *,
    contexts: Mapping[str, ReqContext] | None = None,
    step_seconds: float = 0.001,
    timeout: float = 120.0,
) -> dict[str, Verdict]:
    """Step until every request's prefix lookup returns a hit count (not None)."""
    scheduler = _Scheduler(tier, _NoEvents())
    ctxs = dict(contexts or {})
    for req_id, keys in chains.items():
        ctxs.setdefault(req_id, request(req_id, keys))
    out: dict[str, Verdict] = {}
    start = time.perf_counter()
    steps = 0
    while len(out) < len(chains):
        steps += 1
        for req_id, keys in chains.items():
            if req_id in out:
                continue
            hits = OffloadingConnectorScheduler._maximal_prefix_lookup(
                scheduler, keys, ctxs[req_id], None, None, 0
            )
            if hits is not None:
                out[req_id] = Verdict(hits, steps, time.perf_counter() - start)
        tier.on_schedule_end(END)
        if len(out) < len(chains):
            if time.perf_counter() - start > timeout:
                raise TimeoutError(f"no verdict after {steps} steps")
            time.sleep(step_seconds)
    return out
