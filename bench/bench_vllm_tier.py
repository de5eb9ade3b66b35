"""vLLM tier benchmark: scheduler-side call latency and 1 MiB chunk throughput.

    .venv-vllm/bin/python bench/bench_vllm_tier.py              # 64-chunk jobs, 10 rounds
    .venv-vllm/bin/python bench/bench_vllm_tier.py --rounds 3 --chunk-mib 1 --concurrency 16

Drives ``s3kv.vllm.S3TierManager`` (built by vLLM's own tier factory, with a real
``TieringOffloadingSpec``) the way vLLM's scheduler does: per step it looks up a job's
keys, ends the step, polls ``get_finished_jobs``; stores and loads are 64-chunk jobs on
an mmap-backed primary region. Every scheduler-side call is timed on its own while the
tier's transfers run (so the numbers include contention with its I/O threads). The S3
endpoint is a moto server in its own process on 127.0.0.1 (as bench_transfer.py), or
``--endpoint-url``. Throughput is wall time from ``submit_*`` to the poll that returns
the job: what vLLM sees.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_transfer import MotoServer  # noqa: E402

MiB = 1024 * 1024
CALLS = ("lookup", "lookup x64 (one step)", "on_schedule_end", "submit_store", "submit_load",
         "get_finished_jobs", "touch")


class Timer:
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--chunks", type=int, default=64, help="chunks per job (default 64)")
    p.add_argument("--chunk-mib", type=float, default=1.0, help="chunk (row) size in MiB")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--endpoint-url", help="use this server instead of starting moto")
    args = p.parse_args(argv)

    import boto3
    import numpy as np
    from vllm.v1.kv_offload.base import LookupResult, ReqContext

    from tests.vllm import harness as h

    server = None
    if not args.endpoint_url:
        # moto accepts any credentials; never let a real profile be picked up for it.
        os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                           "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"})
        os.environ.pop("AWS_PROFILE", None)
        server = MotoServer()
    endpoint = args.endpoint_url or server.url  # type: ignore[union-attr]
    row_bytes = int(args.chunk_mib * MiB)
    n = args.chunks
    tier: Any = None
    try:
        bucket = f"s3kv-bench-{uuid.uuid4().hex[:10]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket)
        spec = h.spec(row_bytes=row_bytes, chunks=2 * n)
        view, rows = h.primary_view(2 * n, row_bytes)
        rows[:n] = np.random.default_rng(0).integers(-128, 128, (n, row_bytes), np.int8)
        tier = h.s3_tier(view, spec, url=f"s3://{bucket}/bench", endpoint_url=endpoint,
                         concurrency=args.concurrency, max_attempts=8)
        timer = Timer()
        store_mibs, load_mibs = [], []

        def run(submit: Callable[[Any], None], name: str, job: Any) -> float:
            t0 = time.perf_counter()
            timer(name, submit, job)
            while True:
                done = timer("get_finished_jobs", tier.get_finished_jobs)
                if done:
                    assert [r.job_id for r in done] == [job.job_id] and done[0].success, done
                    return time.perf_counter() - t0
                time.sleep(0.0005)  # a step's worth of other scheduler work, shortened

        for r in range(args.rounds):
            ks = h.keys(n, start=1_000_000 * (r + 1))
            req = f"bench-{r}"
            ctx = ReqContext(req_id=req)
            # Lookups of absent keys: RETRY, then the background batch answers MISS.
            while True:
                t0 = time.perf_counter_ns()
                answers = [timer("lookup", tier.lookup, k, ctx) for k in ks]
                timer.samples["lookup x64 (one step)"].append((time.perf_counter_ns() - t0) / 1000)
                timer("on_schedule_end", tier.on_schedule_end, h.END)
                if LookupResult.RETRY not in answers:
                    break
                time.sleep(0.001)
            tier.on_request_finished(ctx)
            timer("touch", tier.touch, ks, ctx)
            job_mib = n * row_bytes / MiB
            store = h.job(ks, range(n), load=False, req=req)
            store_mibs.append(job_mib / run(tier.submit_store, "submit_store", store))
            rows[n:] = 0
            load = h.job(ks, range(n, 2 * n), load=True, req=req)
            load_mibs.append(job_mib / run(tier.submit_load, "submit_load", load))
            assert np.array_equal(rows[n:], rows[:n])

        print(f"s3kv.vllm.S3TierManager, {n}-chunk jobs of {row_bytes / MiB:g} MiB chunks, "
              f"{args.rounds} rounds, concurrency {args.concurrency}, "
              f"{'moto server on 127.0.0.1' if server else endpoint}")
        print()
        print(f"| {'scheduler-side call':<24} | {'calls':>6} | {'p50 us':>8} | {'p99 us':>8} | "
              f"{'max us':>8} |")
        print(f"|{'-' * 26}|{'-' * 8}:|{'-' * 9}:|{'-' * 9}:|{'-' * 9}:|")
        for name in CALLS:
            s = timer.samples[name]
            print(f"| {name:<24} | {len(s):>6} | {pct(s, 0.5):>8.1f} | {pct(s, 0.99):>8.1f} | "
                  f"{max(s):>8.1f} |")
        print()
        print(f"| {'transfer (64 x 1 MiB job)':<26} | {'median MiB/s':>12} | {'min':>8} | "
              f"{'max':>8} |".replace("64 x 1", f"{n} x {row_bytes / MiB:g}"))
        print(f"|{'-' * 28}|{'-' * 13}:|{'-' * 9}:|{'-' * 9}:|")
        for name, mibs in (("store (submit -> finished)", store_mibs),
                           ("load (submit -> finished)", load_mibs)):
            print(f"| {name:<26} | {statistics.median(mibs):>12.0f} | {min(mibs):>8.0f} | "
                  f"{max(mibs):>8.0f} |")
    finally:
        if tier is not None:
            tier.shutdown()
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
