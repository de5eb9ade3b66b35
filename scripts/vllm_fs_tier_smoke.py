"""Smoke test of vLLM 0.33.0's own FileSystemTierManager, on CPU, no GPU.

Run in .venv-vllm (scripts/vllm-venv.sh builds it):

    .venv-vllm/bin/python scripts/vllm_fs_tier_smoke.py

Part 1 drives the tier through its SecondaryTierManager interface, as the
TieringOffloadingManager would: a real OffloadingConfig and TieringOffloadingSpec,
a numpy-backed primary view, 4 chunks stored, polled, looked up, loaded back into
other rows, plus a load with one missing key (per-key failure report).

Part 2 builds the whole scheduler-side TieringOffloadingManager from a
kv_connector_extra_config with "secondary_tiers": [{"type": "fs", ...}] and plays the
GPU worker by hand (writing rows of the primary view), to show the cascade to the
secondary tier and the promotion back.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import tempfile
import time

import numpy as np

from vllm.v1.kv_offload.base import (
    LookupResult,
    OffloadKey,
    ReqContext,
    ScheduleEndContext,
    make_offload_key,
)
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
from vllm.v1.kv_offload.tiering.fs import io as fs_io
from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

NUM_CHUNKS = 8
ROW_BYTES = 64 * 1024  # multiple of the page size: O_DIRECT needs aligned rows
STEP_END = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())


def offloading_config(extra_config: dict, worker_kv_bytes_per_block: int) -> OffloadingConfig:
    """A real OffloadingConfig as vLLM normalises it, for one TP=1 worker."""
    return OffloadingConfig(
        groups=(
            OffloadingGroupConfig(
                tokens_per_block=16,
                layer_names=("model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"),
                group_id=0,
            ),
        ),
        worker_kv_bytes_per_block=worker_kv_bytes_per_block,
        enable_kv_cache_events=False,
        extra_config=extra_config,
        engine_id="smoke-engine",
        model=OffloadingModelConfig(name="Qwen/Qwen3-0.6B", dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0,
            world_size=1,
            tp_size=1,
            pp_size=1,
            pcp_size=1,
            dcp_size=1,
            data_parallel_index=0,
            data_parallel_size=1,
            data_parallel_rank_local=None,
            is_parallelism_agnostic=True,
        ),
    )


def numpy_primary(num_chunks: int, row_bytes: int) -> tuple[np.ndarray, memoryview]:
    """Page-aligned (anonymous mmap) int8 rows, like vLLM's SharedOffloadRegion view."""
    buf = mmap.mmap(-1, num_chunks * row_bytes)
    rows = np.frombuffer(buf, dtype=np.int8).reshape(num_chunks, row_bytes)
    return rows, memoryview(rows)


def key(i: int) -> OffloadKey:
    return make_offload_key(hashlib.sha256(f"block-{i}".encode()).digest(), 0)


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t0) * 1e6


def wait_for_jobs(tier: SecondaryTierManager, job_ids: set[int], timeout_s: float = 10.0):
    """Poll get_finished_jobs() as the scheduler does, once per 'step'."""
    results: dict[int, JobResult] = {}
    deadline = time.monotonic() + timeout_s
    polls = 0
    while job_ids - results.keys():
        assert time.monotonic() < deadline, f"jobs {job_ids - results.keys()} did not finish"
        for r in tier.get_finished_jobs():
            results[r.job_id] = r
        polls += 1
        time.sleep(0.002)
    return results, polls


def lookup_until_known(tier: SecondaryTierManager, keys: list[OffloadKey], ctx: ReqContext):
    """lookup() every key each step, then on_schedule_end(), until none is RETRY."""
    steps = 0
    while True:
        verdicts = [tier.lookup(k, ctx) for k in keys]
        if LookupResult.RETRY not in verdicts:
            return verdicts, steps
        tier.on_schedule_end(STEP_END)
        steps += 1
        time.sleep(0.002)


def part1_tier_interface(root: str) -> None:
    print("== part 1: FileSystemTierManager through its own interface")
    print(f"fs_io_C extension: {fs_io._HAS_FSIO_C}")
    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": NUM_CHUNKS * ROW_BYTES}
    spec = TieringOffloadingSpec(offloading_config(extra, worker_kv_bytes_per_block=ROW_BYTES))
    rows, view = numpy_primary(NUM_CHUNKS, ROW_BYTES)
    print(f"primary view: format={view.format!r} shape={view.shape} strides={view.strides}")

    # The factory is how vLLM builds a tier from a "secondary_tiers" entry: 'type' (and
    # 'module_path') are popped, every other key becomes a constructor keyword.
    tier = SecondaryTierFactory.create_secondary_tier(
        {"type": "fs", "root_dir": root, "n_read_threads": 2, "n_write_threads": 2},
        view,
        spec,
    )
    assert isinstance(tier, FileSystemTierManager)
    print(f"tier: {type(tier).__name__} tier_type={tier.tier_type!r} "
          f"block_size_bytes={tier.block_size_bytes} o_direct={tier._use_o_direct}")
    try:
        rng = np.random.default_rng(0)
        rows[:4] = rng.integers(-128, 128, size=(4, ROW_BYTES), dtype=np.int8)
        expected = rows[:4].copy()
        keys = [key(i) for i in range(4)]

        ctx1 = ReqContext(req_id="req-1")
        tier.on_new_request(ctx1)
        first, us = timed(tier.lookup, keys[0], ctx1)
        print(f"lookup before store, first call: {first.name} ({us:.0f} us)")
        verdicts, steps = lookup_until_known(tier, keys, ctx1)
        print(f"lookup before store: {[v.name for v in verdicts]} after {steps} step(s)")
        # Verdicts are cached per key while a request references it: finish the request
        # so the next lookup probes the disk again.
        tier.on_request_finished(ctx1)

        store = TransferJob(job_id=1, keys=keys, chunk_ids=np.array([0, 1, 2, 3], np.int32),
                            is_promotion=False, req_context=ctx1)
        _, us = timed(tier.submit_store, store)
        print(f"submit_store(4 chunks) returned in {us:.0f} us")
        results, polls = wait_for_jobs(tier, {1})
        print(f"store result after {polls} poll(s): {results[1]}")

        ctx2 = ReqContext(req_id="req-2")
        tier.on_new_request(ctx2)
        verdicts, steps = lookup_until_known(tier, keys, ctx2)
        print(f"lookup after store: {[v.name for v in verdicts]} after {steps} step(s)")

        rows[4:] = 0
        load = TransferJob(job_id=2, keys=keys, chunk_ids=np.array([4, 5, 6, 7], np.int32),
                           is_promotion=True, req_context=ctx2)
        _, us = timed(tier.submit_load, load)
        print(f"submit_load(4 chunks into rows 4..7) returned in {us:.0f} us")
        results, polls = wait_for_jobs(tier, {2})
        print(f"load result after {polls} poll(s): {results[2]}")
        print(f"rows 4..7 == rows stored from 0..3: {np.array_equal(rows[4:], expected)}")

        # One missing key in the middle: the job fails, successful_keys names the
        # chunks loaded before it (the Python and C loaders stop at the first bad one).
        missing = key(99)
        partial = TransferJob(job_id=3, keys=[keys[0], missing, keys[2]],
                              chunk_ids=np.array([4, 5, 6], np.int32),
                              is_promotion=True, req_context=ctx2)
        tier.submit_load(partial)
        results, _ = wait_for_jobs(tier, {3})
        r = results[3]
        ok = [keys.index(k) if k in keys else "missing" for k in (r.successful_keys or ())]
        print(f"load with a missing key: success={r.success} successful_keys=key{ok} "
              f"transfer_bytes={r.transfer_bytes}")
        tier.on_request_finished(ctx2)

        base = os.path.dirname(tier.file_mapper.get_config_file_path())
        print("files:")
        for dirpath, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                p = os.path.join(dirpath, f)
                print(f"  {os.path.relpath(p, root)}  ({os.path.getsize(p)} bytes)")
        with open(os.path.join(base, "config.json")) as f:
            print("config.json:", json.dumps(json.load(f), sort_keys=True))
    finally:
        tier.shutdown()


def part2_tiering_manager(root: str) -> None:
    print("== part 2: the real TieringOffloadingManager with an fs secondary tier")
    extra = {
        "spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": NUM_CHUNKS * ROW_BYTES,
        "secondary_tiers": [{"type": "fs", "root_dir": root,
                             "n_read_threads": 2, "n_write_threads": 2}],
    }
    spec = TieringOffloadingSpec(offloading_config(extra, worker_kv_bytes_per_block=ROW_BYTES))
    manager = spec.get_manager()
    primary = manager.primary_tier
    rows = np.asarray(primary.get_kv_memoryview())
    print(f"manager: {type(manager).__name__}, primary chunks={spec.num_chunks}, "
          f"row bytes={rows.shape[1]}, tiers={[t.tier_type for t in manager.secondary_tiers]}")
    try:
        keys = [key(100 + i) for i in range(4)]
        ctx = ReqContext(req_id="r1")
        with manager.lock:
            manager.on_new_request(ctx)
            out = manager.prepare_store(keys, ctx)
        chunk_ids = list(out.store_spec.chunk_ids)
        # Play the GPU worker: write the chunks' bytes into their primary rows.
        rng = np.random.default_rng(1)
        payload = rng.integers(-128, 128, size=(4, rows.shape[1]), dtype=np.int8)
        rows[chunk_ids] = payload
        with manager.lock:
            manager.complete_store(keys, ctx)  # cascades to the fs tier (submit_store)
            manager.on_request_finished(ctx)
        deadline = time.monotonic() + 10
        while True:
            with manager.lock:
                manager.on_schedule_end(STEP_END)
                pending = manager.has_pending_work()
            if not pending:
                break
            assert time.monotonic() < deadline
            time.sleep(0.002)
        fs_tier = manager.secondary_tiers[0]
        on_disk = [os.path.exists(fs_tier.file_mapper.get_file_name(k)) for k in keys]
        print(f"cascaded to fs tier: {on_disk}")

        with manager.lock:
            manager.reset_cache()  # empty the primary tier; the fs tier keeps its files
            manager.on_reset_flushed()
        rows[:] = 0

        ctx2 = ReqContext(req_id="r2")
        with manager.lock:
            manager.on_new_request(ctx2)
        seen = []
        deadline = time.monotonic() + 10
        while True:
            with manager.lock:
                verdicts = [manager.lookup(k, ctx2) for k in keys]
                manager.on_schedule_end(STEP_END)
            seen.append("/".join(v.name for v in verdicts))
            if all(v is LookupResult.HIT for v in verdicts):
                break
            assert time.monotonic() < deadline, seen
            time.sleep(0.002)
        print("lookup rounds: " + " -> ".join(dict.fromkeys(seen)))
        with manager.lock:
            spec_out = manager.prepare_load(keys, ctx2)
        loaded = rows[list(spec_out.chunk_ids)]
        print(f"promoted rows equal the stored bytes: {np.array_equal(loaded, payload)}")
        with manager.lock:
            manager.complete_load(keys, ctx2)
            manager.on_request_finished(ctx2)
        # The primary region is unmapped at shutdown only if nothing still exports it.
        del rows, loaded
    finally:
        manager.shutdown()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="vllm-fs-tier-") as root:
        part1_tier_interface(root)
    with tempfile.TemporaryDirectory(prefix="vllm-fs-tier-") as root:
        part2_tiering_manager(root)
    print("ok")


if __name__ == "__main__":
    main()
