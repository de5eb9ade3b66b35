"""Driving vLLM's real TieringOffloadingManager (CPU primary + secondary tiers), no GPU.

The test plays the GPU worker: it writes the rows ``prepare_store`` hands out, and reads
the rows ``prepare_load`` names. Every manager call but ``shutdown`` runs under
``manager.lock``, as the scheduler does.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

from tests.vllm import harness


def s3_entry(url: str, **options: Any) -> dict[str, Any]:
    """A ``secondary_tiers`` entry for s3kv's tier (fast retries for tests)."""
    return {"type": "S3TierManager", "module_path": "s3kv.vllm", "url": url,
            "max_attempts": 2, "backoff_base_seconds": 0.01, **options}


@contextmanager
def manager_with(*tiers: dict[str, Any], chunks: int = 8) -> Iterator[Any]:
    spec = TieringOffloadingSpec(harness.offloading_config(
        chunks=chunks, secondary_tiers=tiers, engine_id=f"s3kv-{uuid.uuid4().hex[:8]}"))
    manager = spec.get_manager()
    try:
        yield manager
    finally:
        manager.shutdown()


def settle(manager: Any, timeout: float = 30.0) -> None:
    """Step until no job of any tier is in flight (their results processed)."""
    deadline = time.monotonic() + timeout
    while True:
        with harness.locked(manager):
            manager.on_schedule_end(harness.END)
            if not manager._jobs:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(manager._jobs)} tier jobs still in flight")
        time.sleep(0.005)


def positioned(ctx: ReqContext, keys: Sequence[OffloadKey], tokens: int = 16) -> ReqContext:
    """Each key's end-token position, recorded as vLLM's scheduler does for a request
    (``update_offload_keys``): ``tokens`` per chunk, the chain from its head."""
    for i, key in enumerate(keys):
        ctx.set_offload_key_position(key, tokens * (i + 1))
    return ctx


def store(manager: Any, keys: Sequence[OffloadKey], seed: int, req: str = "w",
          params: dict[str, Any] | None = None) -> np.ndarray:
    """Store ``keys`` in the primary tier as the worker would; vLLM cascades them.
    ``params``: the request's ``kv_transfer_params`` (its tenant)."""
    rows = np.asarray(manager.primary_tier.get_kv_memoryview())
    ctx = positioned(ReqContext(req_id=req, kv_transfer_params=params), keys)
    with harness.locked(manager):
        manager.on_new_request(ctx)
        out = manager.prepare_store(list(keys), ctx)
    chunk_ids = list(out.store_spec.chunk_ids)
    payload = np.random.default_rng(seed).integers(
        -128, 128, size=(len(chunk_ids), rows.shape[1]), dtype=np.int8)
    rows[chunk_ids] = payload
    with harness.locked(manager):
        manager.complete_store(list(keys), ctx)
        manager.on_request_finished(ctx)
    settle(manager)
    return payload


def load(manager: Any, keys: Sequence[OffloadKey], req: str = "r",
         timeout: float = 30.0, params: dict[str, Any] | None = None,
         ) -> tuple[list[LookupResult], np.ndarray | None]:
    """Empty the primary tier, look ``keys`` up until settled, promote what hits.
    ``params``: the request's ``kv_transfer_params`` (its tenant)."""
    with harness.locked(manager):
        manager.reset_cache()
        if hasattr(manager, "on_reset_flushed"):  # 0.33's second phase
            manager.on_reset_flushed()
    rows = np.asarray(manager.primary_tier.get_kv_memoryview())
    ctx = positioned(ReqContext(req_id=req, kv_transfer_params=params), keys)
    with harness.locked(manager):
        manager.on_new_request(ctx)
    deadline = time.monotonic() + timeout
    while True:
        with harness.locked(manager):
            verdicts = [manager.lookup(k, ctx) for k in keys]
            manager.on_schedule_end(harness.END)
        if all(v in (LookupResult.HIT, LookupResult.MISS) for v in verdicts):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"lookups did not settle: {verdicts}")
        time.sleep(0.005)
    loaded = None
    if all(v is LookupResult.HIT for v in verdicts):
        with harness.locked(manager):
            spec_out = manager.prepare_load(list(keys), ctx)
        loaded = rows[list(spec_out.chunk_ids)].copy()
        with harness.locked(manager):
            manager.complete_load(list(keys), ctx)
    with harness.locked(manager):
        manager.on_request_finished(ctx)
    return verdicts, loaded
