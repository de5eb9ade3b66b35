"""One prompt shape on one link: both tiers and the ceilings, round by round.

A case is (link, prompt tokens, tokens per block): ``n = tokens / tokens_per_block``
blocks of ``tokens_per_block x kv_bytes_per_token`` bytes. One primary region, shaped
like vLLM's CPU tier and shared by both tiers as vLLM shares it, holds 2n rows: the
prompt's KV in rows [0, n), the load target in [n, 2n).

Per round and tier, as vLLM's scheduler drives a tier: the prompt's fresh keys are
looked up (absent; RETRY until the tier's background answer, a step at a time), one
store job of rows [0, n) and one load job of all n blocks into rows [n, 2n) (zeroed
first) are submitted and ``get_finished_jobs`` polled until each returns; the load is
compared byte for byte with what was stored; the bucket is emptied. Tiers alternate
order round by round. Right after s3kv's load, before its objects are deleted, each
awscrt ceiling loads the same objects into the same rows; memcpy copies the rows once
per round. Times are wall seconds from ``submit_*`` to the poll that returns the job;
CPU is this process's (``process_time``: every thread; the servers and the proxy run in
their own processes).
"""

from __future__ import annotations

import gc
import itertools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib import engine_loop as engine
from bench.lib.ceiling import CrtGets, memcpy, parse
from bench.lib.links import Link
from bench.lib.tier_calls import CALLS, Timer, lookup_absent, pct
from bench.lib.trust import mark

GiB = 1 << 30
RGW_HEAD_BYTES = 4 << 20
"""RGW keeps objects up to this size in their head object: deleting frees them at once."""
_key_seeds = itertools.count(1)


SSE_C = "s3kv-sse-c"
"""s3kv's tier with a key per tenant (SSE-C): what encryption at rest costs a load."""
WAIT_BUDGET_SECONDS = 600.0
"""s3kv's tier cancels a load still running at the request's wait budget (2.5 s by
default: vLLM then recomputes); a prompt of 1 GiB may take longer than that on these
links, and the benchmark times the load, as it does the obj tier's, which has none."""


def secret_file() -> Path:
    """A fresh secret for the encrypted tier's keys, removed when the process exits."""
    import atexit
    import base64
    import tempfile

    handle, name = tempfile.mkstemp(prefix="s3kv-bench-secret-")
    atexit.register(Path(name).unlink, missing_ok=True)
    os.write(handle, base64.b64encode(os.urandom(48)))
    os.close(handle)
    return Path(name)


class Unit:
    """One contender in a case (a tier, an awscrt ceiling, memcpy) and its numbers."""

    def __init__(self, name: str, kind: str, thing: Any = None, bucket: str = "") -> None:
        self.name, self.kind, self.thing, self.bucket = name, kind, thing, bucket
        self.reset()

    def reset(self) -> None:
        self.timer = Timer()
        self.seconds: dict[str, list[float]] = {"store": [], "load": []}
        self.cpu: dict[str, list[float]] = {"store": [], "load": []}
        """The client's CPU per GiB: EngineCore's process and, for s3kv's tier, its I/O
        process together; ``engine_cpu`` holds EngineCore's own share."""
        self.engine_cpu: dict[str, list[float]] = {"store": [], "load": []}
        self.server_cpu: dict[str, list[float]] = {"store": [], "load": []}
        """RGW's CPU per GiB over each job (its processes together; not the client's)."""
        self.requests: dict[str, dict[str, int]] = {}
        self.loop: list[engine.Steps] = []
        """The stand-in EngineCore loop beside each load (bench/lib/engine_loop.py)."""
        self.io_process: dict[str, float] | None = None
        """s3kv's I/O process after the last load (:func:`io_process_memory`)."""

    def add(self, what: str, seconds: float, cpu_seconds: float, gib: float,
            engine_cpu_seconds: float | None = None,
            server_cpu_seconds: float | None = None) -> None:
        self.seconds[what].append(seconds)
        self.cpu[what].append(cpu_seconds / gib)
        if engine_cpu_seconds is not None:
            self.engine_cpu[what].append(engine_cpu_seconds / gib)
        if server_cpu_seconds is not None:
            self.server_cpu[what].append(server_cpu_seconds / gib)


def io_process_pid(tier: Any) -> int | None:
    """The pid of s3kv's I/O process behind ``tier``, when it runs one."""
    io = getattr(getattr(tier, "_runner", None), "io", None)
    return getattr(io, "pid", None)


def process_cpu_seconds(pid: int | None) -> float:
    """User and system CPU a live process has used (0 for None)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def io_process_memory(pid: int | None) -> dict[str, float] | None:
    """What s3kv's I/O process holds of its own (MiB of anonymous memory, threads): the
    rows it maps are vLLM's region, shared, not counted."""
    if pid is None:
        return None
    status = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            status[name] = value.split()
    return {"rss_anon_mib": round(int(status["RssAnon"][0]) / 1024, 1),
            "rss_file_mib": round(int(status["RssFile"][0]) / 1024, 1),
            "threads": int(status["Threads"][0])}


class Case:
    def __init__(self, link: Link, *, prompt_tokens: int, block_tokens: int,
                 kv_bytes_per_token: int, threads: int, tiers: list[str],
                 ceilings: list[str]) -> None:
        from tests.vllm import harness as h

        self.link, self.prompt_tokens, self.block_tokens = link, prompt_tokens, block_tokens
        self.n = prompt_tokens // block_tokens
        self.row_bytes = block_tokens * kv_bytes_per_token
        self.gib = self.n * self.row_bytes / GiB
        self.view, self.rows = h.primary_view(2 * self.n, self.row_bytes)
        rng = np.random.default_rng(prompt_tokens + block_tokens)
        for i in range(self.n):
            self.rows[i] = rng.integers(-128, 128, self.row_bytes, dtype=np.int8)
        spec = h.spec(row_bytes=self.row_bytes, chunks=2 * self.n,
                      engine_id=f"prompt-{link.name}-{prompt_tokens}-{block_tokens}")
        self.units: dict[str, Unit] = {}
        try:
            for kind in tiers:
                bucket = link.bucket(kind.replace("-", ""))
                self.units[kind] = Unit(kind, "tier", self._tier(kind, spec, bucket, threads),
                                        bucket)
            for spec_text in ceilings:
                self._ceiling(spec_text, threads)
        except BaseException:
            self.close()
            raise

    def _tier(self, kind: str, spec: Any, bucket: str, threads: int) -> Any:
        from tests.vllm import harness as h

        link = self.link
        if kind == SSE_C:
            # s3kv's tier with each tenant's key (docs/tenants.md): every request of the
            # prompt's one tenant carries its SSE-C key; the store encrypts and decrypts.
            return h.s3_tier(self.view, spec, url=f"s3://{bucket}/bench",
                             endpoint_url=link.endpoint, concurrency=threads, max_attempts=8,
                             access_key_id=link.access_key, secret_access_key=link.secret_key,
                             ca_bundle=link.ca_bundle, sse_c_secret_file=str(secret_file()),
                             default_tenant="bench", wait_budget_seconds=WAIT_BUDGET_SECONDS)
        if kind in ("s3kv", "s3kv-16"):
            # s3kv-16: at most as many connections as the obj tier keeps (one per I/O
            # thread): a lead there comes from the client, not from more connections
            cap = {"max_connections": threads} if kind == "s3kv-16" else {}
            return h.s3_tier(self.view, spec, url=f"s3://{bucket}/bench",
                             endpoint_url=link.endpoint, concurrency=threads, max_attempts=8,
                             access_key_id=link.access_key, secret_access_key=link.secret_key,
                             ca_bundle=link.ca_bundle, wait_budget_seconds=WAIT_BUDGET_SECONDS,
                             **cap)
        # Every link ends at RGW 16 (harness.obj_tier says why it needs rgw=True).
        return h.obj_tier(self.view, spec, endpoint=link.endpoint, bucket=bucket,
                          prefix="bench", access_key=link.access_key,
                          secret_key=link.secret_key, ca_bundle=link.ca_bundle or "",
                          io_threads=threads, rgw=True)

    def _ceiling(self, spec_text: str, threads: int) -> None:
        if spec_text == "memcpy":
            self.units["memcpy"] = Unit("memcpy", "ceiling")
            return
        if "s3kv" not in self.units:
            raise SystemExit("--ceilings: the awscrt ceilings load s3kv's objects; keep "
                             "s3kv in --tiers")
        settings = parse(spec_text)
        crt = (CrtGets.s3kv(connections=threads, **self.link.credentials()) if settings is None
               else CrtGets(part_bytes=settings[0], connections=settings[1],
                            **self.link.credentials()))
        self.units[crt.name] = Unit(crt.name, "ceiling", crt)

    # -- rounds -------------------------------------------------------------------------

    def round(self, r: int) -> None:
        idle = self.units.setdefault("engine-idle", Unit("engine-idle", "loop"))
        idle.loop.append(engine.idle(0.5))  # the loop with no load beside it
        tiers = [u for u in self.units.values() if u.kind == "tier"]
        for unit in tiers if r % 2 == 0 else tiers[::-1]:
            self._tier_round(unit, r)
        if "memcpy" in self.units:
            self.rows[self.n:] = 0
            self.units["memcpy"].add("load", *memcpy(self.rows[: self.n], self.rows[self.n:]),
                                     self.gib)

    def reset(self) -> None:
        """Forget the warm-up round."""
        for unit in self.units.values():
            unit.reset()

    def _tier_round(self, unit: Unit, r: int) -> None:
        from tests.vllm import harness as h

        n, tier, timer, link = self.n, unit.thing, unit.timer, self.link
        ks = h.keys(n, start=next(_key_seeds) * 100_000)
        ctx = lookup_absent(timer, tier, ks, f"prompt-{unit.name}-{r}")
        before = link.requests()
        seconds, cpu, engine_cpu, server_cpu = self._job(
            unit, tier.submit_store, "submit_store",
            h.job(ks, range(n), load=False, req=ctx.req_id))
        unit.add("store", seconds, cpu, self.gib, engine_cpu, server_cpu)
        middle = link.requests()
        self.rows[n:] = 0
        seconds, cpu, engine_cpu, server_cpu = self._job(
            unit, tier.submit_load, "submit_load",
            h.job(ks, range(n, 2 * n), load=True, req=ctx.req_id))
        unit.add("load", seconds, cpu, self.gib, engine_cpu, server_cpu)
        if (pid := io_process_pid(tier)) is not None:
            unit.io_process = io_process_memory(pid)
        after = link.requests()
        if not np.array_equal(self.rows[n:], self.rows[:n]):
            raise RuntimeError(f"{unit.name} on {link.name}: the loaded bytes differ from "
                               "the stored ones")
        if before is not None and middle is not None and after is not None:
            unit.requests = {"store": _diff(middle, before), "load": _diff(after, middle)}
            if unit.requests["store"]["PUT"] < n or unit.requests["load"]["GET"] < n:
                raise RuntimeError(f"{unit.name}: the proxy saw {unit.requests} for {n} blocks: "
                                   "requests bypass the AWS-like link")
        if unit.name == "s3kv":
            keys = link.block_keys(unit.bucket)
            for ceiling in (u for u in self.units.values() if isinstance(u.thing, CrtGets)):
                self.rows[n:] = 0
                before = link.requests()
                ceiling.add("load", *ceiling.thing.load(unit.bucket, keys, self.rows[n:]),
                            self.gib)
                after = link.requests()
                if before is not None and after is not None:
                    ceiling.requests = {"load": _diff(after, before)}
        link.empty(unit.bucket)
        if self.row_bytes > RGW_HEAD_BYTES:
            link.collect_garbage()

    def _job(self, unit: Unit, submit: Callable[[Any], None], name: str,
             job: Any) -> tuple[float, float, float, float]:
        """Submit a job and step the stand-in EngineCore loop until it returns: each step
        does the loop's Python work, waits as for the model, then polls the tier, as
        vLLM's scheduler does. Seconds, the client's CPU (this process's and the tier's
        I/O process's, if it runs one) and this process's alone, the loop's own work left
        out of both; and RGW's CPU over the job (its processes together)."""
        tier, timer = unit.thing, unit.timer
        worker = io_process_pid(tier)
        w0 = process_cpu_seconds(worker)
        s0 = sum(process_cpu_seconds(pid) for pid in self.link.server_pids)
        c0, t0 = time.process_time(), time.perf_counter()
        timer(name, submit, job)
        finished: list[Any] = []

        def poll() -> bool:
            finished.extend(timer("get_finished_jobs", tier.get_finished_jobs))
            return bool(finished)

        steps = engine.run_until(poll)
        seconds = time.perf_counter() - t0
        engine_cpu = time.process_time() - c0 - steps.work_cpu_seconds
        server_cpu = sum(process_cpu_seconds(pid) for pid in self.link.server_pids) - s0
        if [d.job_id for d in finished] != [job.job_id] or not finished[0].success:
            reason = "; ".join(str(d.job_id) for d in finished)
            raise RuntimeError(f"{unit.name} on {self.link.name}: {name} of job {job.job_id} "
                               f"failed (finished: {reason or 'none'}); the tier's log says why")
        cpu = engine_cpu + process_cpu_seconds(worker) - w0  # the same process throughout
        if name == "submit_load":
            unit.loop.append(steps)
        return seconds, cpu, engine_cpu, server_cpu

    # -- results ------------------------------------------------------------------------

    def rows_out(self) -> list[dict[str, Any]]:
        out = []
        for unit in self.units.values():
            row: dict[str, Any] = {
                "link": self.link.name, "prompt_tokens": self.prompt_tokens,
                "block_tokens": self.block_tokens, "block_bytes": self.row_bytes,
                "blocks": self.n, "who": unit.name, "kind": unit.kind,
                "rounds": len(unit.seconds["load"]) or len(unit.loop),
            }
            if isinstance(unit.thing, CrtGets):
                row["settings"] = unit.thing.describe()
            samples: dict[str, list[float]] = {}
            for what in ("store", "load"):
                seconds, cpu = unit.seconds[what], unit.cpu[what]
                if not seconds:
                    continue
                row.update({
                    f"{what}_s": statistics.median(seconds), f"{what}_s_min": min(seconds),
                    f"{what}_s_max": max(seconds), f"{what}_s_runs": [round(v, 4) for v in seconds],
                    f"{what}_mib_s": self.gib * 1024 / statistics.median(seconds),
                    f"{what}_cpu_s_per_gib": statistics.median(cpu),
                    f"{what}_cpu_s_per_gib_runs": [round(v, 3) for v in cpu],
                })
                samples[f"{what}_s"] = seconds
                samples[f"{what}_cpu_s_per_gib"] = cpu
                if unit.engine_cpu[what]:
                    row[f"{what}_engine_cpu_s_per_gib"] = statistics.median(unit.engine_cpu[what])
                if unit.server_cpu[what]:
                    row[f"{what}_server_cpu_s_per_gib"] = round(
                        statistics.median(unit.server_cpu[what]), 3)
            if unit.io_process is not None:
                row["io_process"] = unit.io_process
            if unit.kind == "tier":
                row["calls_us"] = {
                    name: {"n": len(s), "p50": pct(s, 0.5), "p99": pct(s, 0.99), "max": max(s)}
                    for name in CALLS if (s := unit.timer.samples[name])}
            if unit.requests:
                row["requests"] = unit.requests
            if unit.loop:  # the stand-in EngineCore loop: during each load, or idle
                per_s = [s.per_second for s in unit.loop]
                all_steps = engine.Steps(sum(s.seconds for s in unit.loop),
                                         [t for s in unit.loop for t in s.step_seconds])
                row["loop"] = {**all_steps.summary(),
                               "steps_per_s": round(statistics.median(per_s), 1),
                               "steps_per_s_min": round(min(per_s), 1),
                               "steps_per_s_max": round(max(per_s), 1),
                               "steps_per_s_runs": [round(v, 1) for v in per_s]}
                samples["loop_steps_per_s"] = per_s
            out.append(mark(row, samples))
        return out

    def close(self) -> None:
        for unit in self.units.values():
            if unit.kind == "tier":
                unit.thing.shutdown()
        self.units.clear()
        # The region is 2x the prompt: let it go before the next case maps its own. The
        # tiers' reference cycles were frozen with the heap; unfreeze so they can go.
        self.view = self.rows = None  # type: ignore[assignment]
        gc.unfreeze()
        gc.collect()


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}
