"""vLLM tier benchmark: s3kv's tier beside vLLM's own object-store tier, same workload.

    .venv-vllm/bin/python bench/bench_vllm_tier.py                      # moto, RGW HTTP + TLS
    .venv-vllm/bin/python bench/bench_vllm_tier.py --servers rgw-http --runs 5
    .venv/bin/python bench/bench_vllm_tier.py --redraw vllm-tier.json
    .venv/bin/python bench/bench_vllm_tier.py --table vllm-tier.json

Two tiers, each built by vLLM's own ``SecondaryTierFactory`` with a real
``TieringOffloadingSpec``: ``s3kv.vllm.S3TierManager`` and vLLM 0.33.0's
``ObjectStoreSecondaryTierManager`` (NIXL's OBJ plugin, the AWS C++ SDK), both with the
same number of I/O threads (``--threads``). Each is driven the way vLLM's scheduler
drives a tier: per step it looks up a job's keys and ends the step; a job is submitted
and ``get_finished_jobs`` polled until it returns. Per run and tier: one store job and
one load job of ``--job-mib`` MiB in chunks of 256 KiB, 1 MiB and 2 MiB; loads are
checked byte for byte. Runs are interleaved (tier order alternates) and the table shows
medians over ``--runs``.

* MiB/s: wall time from ``submit_*`` to the poll that returns the job (what vLLM sees).
* CPU s/GiB: this process's user+system CPU during the job (the servers run in their
  own processes), per GiB moved: the client's cost, polling included.
* Scheduler-side calls (lookup, on_schedule_end, submit_*, get_finished_jobs): p50, p99
  and max in microseconds, over all runs.

As vLLM's ``EngineCore`` does after start-up, the heap is frozen (``freeze_gc_heap()``)
once the tiers exist; ``--no-freeze`` leaves it, and then Python's full collections walk
every torch and transformers object, on whichever thread (an awscrt callback of s3kv's
tier, often) allocates: a third of s3kv's tier CPU at 2 MiB in a py-spy profile.

Servers: moto's S3 server in its own process, Ceph RGW 16 (tests/servers/rgw.py) over
HTTP and over TLS. On RGW the obj tier gets ``AWS_REQUEST_CHECKSUM_CALCULATION=
when_required`` (without it RGW 16 answers its uploads 411); s3kv needs nothing.
Results also go to ``--json`` and, where matplotlib is installed (the ``bench`` extra),
a chart to ``--chart``. It refuses to run on a loaded machine, and marks rows whose runs
disagree (bench/lib/trust.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # s3kv, bench.lib and scripts from this checkout

from bench.lib import results  # noqa: E402
from bench.lib import trust as _trust  # noqa: E402
from bench.lib.tier_calls import CALLS, Timer, cpu_seconds, lookup_absent, pct  # noqa: E402

KiB, MiB, GiB = 1024, 1024 * 1024, 1024**3
SIZES = (256 * KiB, 1 * MiB, 2 * MiB)
TIERS = ("s3kv", "vllm-obj")
SERVERS = ("moto", "rgw-http", "rgw-https")


class Server:
    """An S3 endpoint, its credentials and a boto3 client for bucket chores."""

    def __init__(self, name: str, endpoint: str, access: str, secret: str, ca: str | None):
        import boto3
        from botocore.config import Config

        self.name, self.endpoint, self.access, self.secret, self.ca = (
            name, endpoint, access, secret, ca)
        self.client = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=access,
            aws_secret_access_key=secret, region_name="us-east-1", verify=ca or True,
            config=Config(s3={"addressing_style": "path"},
                          request_checksum_calculation="when_required",
                          response_checksum_validation="when_required"),
        )

    def empty(self, bucket: str) -> None:
        """Delete what a run stored (RGW's memstore holds it in RAM)."""
        while True:
            listed = self.client.list_objects_v2(Bucket=bucket).get("Contents", [])
            keys = [{"Key": o["Key"]} for o in listed if not o["Key"].endswith("config.json")]
            if not keys:
                return
            self.client.delete_objects(Bucket=bucket, Delete={"Objects": keys})


def make_tier(kind: str, server: Server, bucket: str, view: memoryview, spec: Any,
              threads: int) -> Any:
    from tests.vllm import harness as h

    if kind == "s3kv":
        return h.s3_tier(view, spec, url=f"s3://{bucket}/bench", endpoint_url=server.endpoint,
                         concurrency=threads, max_attempts=8, access_key_id=server.access,
                         secret_access_key=server.secret, ca_bundle=server.ca)
    return h.obj_tier(view, spec, endpoint=server.endpoint, bucket=bucket, prefix="bench",
                      access_key=server.access, secret_key=server.secret,
                      ca_bundle=server.ca or "", io_threads=threads, rgw="rgw" in server.name)


class Bench:
    """One tier on one server at one chunk size: its runs' numbers accumulate here."""

    def __init__(self, kind: str, server: Server, row_bytes: int, job_bytes: int,
                 threads: int) -> None:
        import numpy as np

        from tests.vllm import harness as h

        self.kind, self.server, self.row_bytes = kind, server, row_bytes
        self.n = max(1, job_bytes // row_bytes)
        self.bucket = f"bench-{kind.replace('-', '')}-{uuid.uuid4().hex[:8]}"
        server.client.create_bucket(Bucket=self.bucket)
        spec = h.spec(row_bytes=row_bytes, chunks=2 * self.n,
                      engine_id=f"bench-{self.bucket}")
        self.view, self.rows = h.primary_view(2 * self.n, row_bytes)
        self.rows[: self.n] = np.random.default_rng(row_bytes).integers(
            -128, 128, (self.n, row_bytes), np.int8)
        self.tier = make_tier(kind, server, self.bucket, self.view, spec, threads)
        self.timer = Timer()
        self.mib_s: dict[str, list[float]] = {"store": [], "load": []}
        self.cpu_s_gib: dict[str, list[float]] = {"store": [], "load": []}

    def _job(self, submit: Callable[[Any], None], name: str, job: Any) -> tuple[float, float]:
        tier, timer = self.tier, self.timer
        c0, t0 = cpu_seconds(), time.perf_counter()
        timer(name, submit, job)
        while True:
            done = list(timer("get_finished_jobs", tier.get_finished_jobs))
            if done:
                assert [r.job_id for r in done] == [job.job_id] and done[0].success, done
                return time.perf_counter() - t0, cpu_seconds() - c0
            time.sleep(0.0005)  # a step's worth of other scheduler work, shortened

    def run(self, r: int) -> None:
        import numpy as np

        from tests.vllm import harness as h

        n, tier, timer = self.n, self.tier, self.timer
        ks = h.keys(n, start=1_000_000 * (r + 1) + self.row_bytes)
        ctx = lookup_absent(timer, tier, ks, f"bench-{r}")
        gib = n * self.row_bytes / GiB
        for what, rows in (("store", range(n)), ("load", range(n, 2 * n))):
            if what == "load":
                self.rows[n:] = 0
            job = h.job(ks, rows, load=what == "load", req=ctx.req_id)
            submit = tier.submit_load if what == "load" else tier.submit_store
            seconds, cpu = self._job(submit, f"submit_{what}", job)
            self.mib_s[what].append(gib * 1024 / seconds)
            self.cpu_s_gib[what].append(cpu / gib)
        assert np.array_equal(self.rows[n:], self.rows[:n])
        self.server.empty(self.bucket)

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "server": self.server.name, "tier": self.kind, "block_bytes": self.row_bytes,
            "blocks_per_job": self.n, "runs": len(self.mib_s["store"]),
        }
        for what in ("store", "load"):
            out[f"{what}_mib_s"] = statistics.median(self.mib_s[what])
            out[f"{what}_cpu_s_per_gib"] = statistics.median(self.cpu_s_gib[what])
            out[f"{what}_mib_s_runs"] = [round(v, 1) for v in self.mib_s[what]]
            out[f"{what}_cpu_s_per_gib_runs"] = [round(v, 3) for v in self.cpu_s_gib[what]]
        out["calls_us"] = {
            name: {"n": len(s), "p50": pct(s, 0.5), "p99": pct(s, 0.99), "max": max(s)}
            for name in CALLS if (s := self.timer.samples[name])
        }
        return _trust.mark(out, {f"{w}_mib_s": self.mib_s[w] for w in ("store", "load")}
                           | {f"{w}_cpu_s_per_gib": self.cpu_s_gib[w] for w in ("store", "load")})

    def close(self) -> None:
        self.tier.shutdown()


def bench_server(server: Server, args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for row_bytes in args.sizes:
        benches = [Bench(kind, server, row_bytes, args.job_mib * MiB, args.threads)
                   for kind in args.tiers]
        if not args.no_freeze:
            # What vLLM's EngineCore does once its scheduler (and so its tiers) exist: the
            # start-up heap leaves the GC's view. Without it every full collection walks
            # torch's and transformers' objects, from whichever thread allocates.
            from vllm.utils.gc_utils import freeze_gc_heap

            freeze_gc_heap()
        try:
            benches[0].run(-1)  # warm-up (connections, first requests); not counted
            benches[0].mib_s = {"store": [], "load": []}
            benches[0].cpu_s_gib = {"store": [], "load": []}
            for b in benches[1:]:
                b.run(-1)
                b.mib_s, b.cpu_s_gib = {"store": [], "load": []}, {"store": [], "load": []}
            for b in benches:
                b.timer = Timer()
            for r in range(args.runs):
                for b in benches if r % 2 == 0 else benches[::-1]:
                    b.run(r)
        finally:
            for b in benches:
                b.close()
        for b in benches:
            results.append(b.result())
            print_row(results[-1])
    return results


def print_row(row: dict[str, Any]) -> None:
    calls = row["calls_us"]
    print(
        f"| {row['server']:<9} | {row['tier']:<8} | {row['block_bytes'] // KiB:>5} KiB | "
        f"{row['store_mib_s']:>6.0f} | {row['load_mib_s']:>6.0f} | "
        f"{row['store_cpu_s_per_gib']:>5.2f} | {row['load_cpu_s_per_gib']:>5.2f} | "
        + " | ".join(
            f"{calls[c]['p50']:.0f}/{calls[c]['p99']:.0f}/{calls[c]['max']:.0f}"
            for c in CALLS if c in calls
        )
        + " |",
        flush=True,
    )


def header() -> None:
    cols = " | ".join(f"{c} p50/p99/max us" for c in CALLS)
    print(f"| server    | tier     | block     |  store |   load | CPU s/GiB st | ld | {cols} |")


@contextlib.contextmanager
def servers(names: list[str]) -> Iterator[dict[str, Server]]:
    from bench.lib.moto_server import MotoServer

    out: dict[str, Server] = {}
    moto = rgw = None
    try:
        if "moto" in names:
            moto = MotoServer()
            out["moto"] = Server("moto", moto.url, "bench", "bench", None)
        if any(n.startswith("rgw") for n in names):
            from tests.servers.rgw import RGWServer

            rgw = RGWServer(memstore_bytes=3 << 30).start()
            assert rgw.http_endpoint and rgw.https_endpoint
            if "rgw-http" in names:
                out["rgw-http"] = Server("rgw-http", rgw.http_endpoint, rgw.access_key,
                                         rgw.secret_key, None)
            if "rgw-https" in names:
                out["rgw-https"] = Server("rgw-https", rgw.https_endpoint, rgw.access_key,
                                          rgw.secret_key, rgw.ca_bundle)
        yield out
    finally:
        if moto is not None:
            moto.stop()
        if rgw is not None:
            rgw.stop()


def markdown(doc: dict[str, Any]) -> str:
    """The results as the table in docs/vllm-tier.md."""
    lines = [
        "| server | block | tier | store MiB/s | load MiB/s | store CPU s/GiB | load CPU s/GiB "
        "| µs p50 / p99 / max: lookup | submit_store | submit_load | get_finished_jobs |",
        "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in doc["rows"]:
        calls = r["calls_us"]
        lines.append(
            f"| {r['server']} | {r['block_bytes'] // KiB} KiB | {r['tier']}{_trust.flag(r)} "
            f"| {r['store_mib_s']:.0f} | {r['load_mib_s']:.0f} "
            f"| {r['store_cpu_s_per_gib']:.2f} | {r['load_cpu_s_per_gib']:.2f} | "
            + " | ".join(
                "{p50:.0f} / {p99:.0f} / {max:.0f}".format(**calls[c])
                for c in ("lookup", "submit_store", "submit_load", "get_finished_jobs")
            )
            + " |"
        )
    notes = _trust.notes(doc, doc["rows"], _label)
    return "\n".join(lines + (["", *notes] if notes else []))


def _label(r: dict[str, Any]) -> str:
    return f"{r['server']} {r['block_bytes'] // KiB} KiB {r['tier']}"


def chart(doc: dict[str, Any], path: Path) -> Path:
    """Store and load MiB/s per server and chunk size, s3kv's tier beside vLLM's obj tier."""
    from scripts.charts import figure, grouped_bars, save

    rows, meta = doc["rows"], doc["meta"]
    names = [s for s in SERVERS if any(r["server"] == s for r in rows)]
    label = {"s3kv": "s3kv", "vllm-obj": "vLLM obj tier (NIXL)"}
    fig, axes = figure(
        title="vLLM tier: s3kv beside vLLM's own object-store tier (median MiB/s)",
        footer=(
            f"Measured: one store and one load job of {meta['job_mib']} MiB per run and tier, "
            f"{meta['runs']} interleaved runs, {meta['threads']} I/O threads each, loads checked "
            f"byte for byte; both tiers built by vLLM 0.33.0's SecondaryTierFactory.\n"
            f"Machine: {meta['machine']}. Command: python {meta['command']}"
            + "".join(f"\n{n}" for n in _trust.notes(doc, rows, _label,
                                                     metrics=["store_mib_s", "load_mib_s"]))
        ),
        nrows=2, ncols=len(names), size=(4.5 * len(names), 7.5),
    )  # fmt: skip
    for col, name in enumerate(names):
        for row, what in enumerate(("store", "load")):
            series = {
                label[t]: [next((r[f"{what}_mib_s"] for r in rows if r["server"] == name
                                 and r["tier"] == t and r["block_bytes"] == b), None)
                           for b in SIZES]
                for t in TIERS
            }  # fmt: skip
            grouped_bars(axes[row * len(names) + col], groups=[f"{b // KiB} KiB" for b in SIZES],
                         series=series, ylabel=f"{what} MiB/s", title=f"{name}: {what}",
                         legend=row == 0 and col == 0)  # fmt: skip
    return save(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", default=",".join(SERVERS))
    p.add_argument("--tiers", default=",".join(TIERS))
    p.add_argument("--sizes", default=",".join(str(b // KiB) for b in SIZES),
                   help="chunk sizes in KiB (default 256,1024,2048)")
    p.add_argument("--runs", type=int, default=3, help="interleaved runs (median; >= 3)")
    p.add_argument("--job-mib", type=int, default=64, help="MiB per store or load job")
    p.add_argument("--threads", type=int, default=16, help="I/O threads of each tier")
    p.add_argument("--no-freeze", action="store_true",
                   help="skip vLLM's freeze_gc_heap() after building the tiers")
    p.add_argument("--json", type=Path, default=Path("vllm-tier.json"))
    p.add_argument("--chart", type=Path, default=Path("vllm-tier.png"))
    p.add_argument("--redraw", type=Path, metavar="JSON", help="only draw --chart from a JSON")
    p.add_argument("--table", type=Path, metavar="JSON", help="only print a JSON's table")
    _trust.add_arguments(p)
    args = p.parse_args(argv)
    if results.from_saved(args, markdown, chart):
        return 0
    trust = _trust.gate(args)
    args.tiers = args.tiers.split(",")
    args.sizes = [int(k) * KiB for k in args.sizes.split(",")]
    os.environ.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1"})
    os.environ.pop("AWS_PROFILE", None)
    rows: list[dict[str, Any]] = []
    header()
    with servers(args.servers.split(",")) as found:
        for name in args.servers.split(","):
            rows += bench_server(found[name], args)

    doc = {
        "meta": {
            "command": "bench/bench_vllm_tier.py " + " ".join(argv or sys.argv[1:]),
            "job_mib": args.job_mib, "threads": args.threads, "runs": args.runs,
            "gc_freeze": not args.no_freeze,
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "versions": _trust.versions("vllm", "nixl", "s3kv", "awscrt"),
            "machine": _trust.machine(shared=trust["loaded"]),
        },
        "rows": rows,
    }
    _trust.stamp(doc, trust)
    print(f"wrote {results.write(doc, args.json)}")
    results.draw(chart, doc, args.chart, script="bench/bench_vllm_tier.py", saved=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
