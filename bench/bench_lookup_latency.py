"""Lookup cost under S3-like latency: s3kv's tier against vLLM's obj tier.

    .venv-vllm/bin/python bench/bench_lookup_latency.py                 # moto and RGW
    .venv-vllm/bin/python bench/bench_lookup_latency.py --backend moto --chains 2048 \\
        --present 50 --json /tmp/lookup.json --chart docs/img/lookup-requests.png

A TCP proxy on 127.0.0.1 (bench/lib/latency_proxy.py, its own process) holds every request
``--delay-ms`` (15 by default: AWS puts the median latency of small S3 requests "in the
tens of milliseconds"; a HEAD is the smallest there is; see that module) in front of
moto's server or Ceph RGW 16 (tests/servers/rgw.py). For each chain length and stored
fraction, with cold caches (a new tier per run), both tiers are built by vLLM's own
factory and driven by vLLM 0.33.0's own scheduler lookup loop
(``OffloadingConnectorScheduler._maximal_prefix_lookup`` in
``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``, called through
tests/vllm/scheduler_loop.py), stepping every ``--step-ms``. Reported per run: HEADs the
proxy saw, rounds (s3kv: the search's round trips; obj: one ``query_memory`` call, with
the most requests the proxy saw in flight at once) and the time from the first
``lookup`` call to the verdict. Rows of both tiers are interleaved.

vLLM's obj tier goes through NIXL (``pip install --no-deps nixl-cu12==1.5.1
nixl==1.5.1`` into .venv-vllm); on RGW it needs AWS_REQUEST_CHECKSUM_CALCULATION=
when_required, set here. Its stored keys are its FileMapper's with ``//`` collapsed (what
NIXL's AWS SDK sends). Objects are written straight to the server, bypassing the proxy.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # s3kv, bench.lib and scripts from this checkout

from bench.lib import trust as _trust  # noqa: E402
from bench.lib.latency_proxy import LatencyProxy  # noqa: E402
from bench.lib.moto_server import MotoServer  # noqa: E402

ROW_BYTES = 4096
TIERS = ("s3kv", "obj")


class Backend:
    """A server, a bucket with the stored chain for both tiers' layouts, a proxy."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        import boto3
        from botocore.config import Config

        self.name = name
        self.server: Any = None
        self.rgw: Any = None
        if name == "moto":
            os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"})
            self.server = MotoServer()
            self.url, self.access_key, self.secret_key = self.server.url, "bench", "bench"
        else:
            from tests.servers.rgw import RGWServer

            self.rgw = RGWServer().start()
            self.url = self.rgw.http_endpoint
            self.access_key, self.secret_key = self.rgw.access_key, self.rgw.secret_key
            os.environ.update(
                {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
            )
        os.environ.update({"AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"})
        os.environ.pop("AWS_PROFILE", None)
        self.s3 = boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            config=Config(
                s3={"addressing_style": "path"},
                request_checksum_calculation="when_required",
                max_pool_connections=32,
            ),
        )
        self.bucket = f"s3kv-lookup-{uuid.uuid4().hex[:10]}"
        self.s3.create_bucket(Bucket=self.bucket)
        self.proxy = LatencyProxy(self.url, delay_seconds=args.delay_ms / 1000)

    def put(self, names: list[str]) -> None:
        with ThreadPoolExecutor(32) as pool:
            list(
                pool.map(lambda n: self.s3.put_object(Bucket=self.bucket, Key=n, Body=b"k"), names)
            )

    def close(self) -> None:
        self.proxy.close()
        if self.server is not None:
            self.server.stop()
        if self.rgw is not None:
            self.rgw.stop()


def make_tier(kind: str, backend: Backend, spec: Any, view: memoryview) -> Any:
    from tests.vllm import harness as h

    if kind == "s3kv":
        tier = h.s3_tier(
            view,
            spec,
            url=f"s3://{backend.bucket}/s3kv",
            endpoint_url=backend.proxy.url,
            max_attempts=3,
        )
        # Once per engine, before any lookup (as the obj tier's connectivity probe).
        tier._prober._check_manifest()
        return tier
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    config = {
        "type": "obj",
        "prefix": "obj",
        "store_config": {
            "bucket": backend.bucket,
            "endpoint_override": backend.proxy.url,
            "scheme": "http",
            "access_key": backend.access_key,
            "secret_key": backend.secret_key,
            "region": "us-east-1",
        },
    }
    return SecondaryTierFactory.create_secondary_tier(config, view, spec)


def obj_names(spec: Any, keys: list[Any]) -> list[str]:
    from vllm.v1.kv_offload.file_mapper import FileMapper

    mapper = FileMapper.from_offloading_spec(
        "obj/", spec, blocks_per_file=spec.blocks_per_chunk, parallel_agnostic=True
    )
    return [mapper.get_file_name(k).replace("//", "/") for k in keys]


def run_one(kind: str, backend: Backend, spec: Any, chain: list[Any], step_s: float) -> dict:
    from tests.vllm import harness as h
    from tests.vllm.scheduler_loop import verdicts

    view, _ = h.primary_view(8, ROW_BYTES)
    tier = make_tier(kind, backend, spec, view)
    manager = tier._lookup_manager
    inner = manager.batch_lookup
    spans: list[float] = []

    def timed(keys: list[Any], ctx: Any) -> list[bool]:
        t0 = time.perf_counter()
        out = list(inner(keys, ctx))
        spans.append(time.perf_counter() - t0)
        return out

    manager.batch_lookup = timed  # the lookup thread calls self.batch_lookup
    try:
        before = backend.proxy.counts()
        backend.proxy.reset_peak()
        (verdict,) = verdicts(tier, {"req": chain}, step_seconds=step_s, timeout=600).values()
        after = backend.proxy.counts()
        out = {
            "hits": verdict.hits,
            "seconds": verdict.seconds,
            "batch_lookup_seconds": sum(spans),
            "steps": verdict.steps,
            # presence looks: vLLM's obj tier sends HEADs, s3kv a GET of one byte (bound
            # to its request); a lookup loads nothing, so every GET here is a look
            "heads": sum(after[m] - before[m] for m in ("HEAD", "GET")),
            "requests": sum(after.values()) - sum(before.values()),
            "peak_in_flight": backend.proxy.peak_in_flight(),
        }
        if kind == "s3kv":
            out["rounds"] = manager.rounds
        return out
    finally:
        tier.shutdown()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["moto", "rgw", "both"], default="both")
    p.add_argument("--delay-ms", type=float, default=15.0)
    p.add_argument("--step-ms", type=float, default=1.0, help="pause between scheduler steps")
    p.add_argument("--chains", default="256,2048,8192", help="chain lengths, comma-separated")
    p.add_argument("--present", default="0,50,100", help="stored percentages")
    p.add_argument("--tiers", default=",".join(TIERS))
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--json", type=Path, help="write every run here")
    p.add_argument("--chart", type=Path, help="PNG: HEADs against chain length (matplotlib)")
    p.add_argument(
        "--from-json", "--redraw", type=Path, help="print the table (and chart) of a past run"
    )
    _trust.add_arguments(p)
    args = p.parse_args(argv)
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        print(markdown(saved))
        if args.chart:
            chart(saved["rows"], args.chart, saved["args"]["delay_ms"], saved)
        return 0
    args.trust = _trust.gate(args)
    os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")  # NIXL on RGW

    from tests.vllm import harness as h

    chains = [int(x) for x in args.chains.split(",")]
    present = [int(x) for x in args.present.split(",")]
    tiers = [t for t in args.tiers.split(",") if t]
    longest = max(chains)
    stored = h.keys(longest, start=10_000_000)
    spec = h.spec(row_bytes=ROW_BYTES, chunks=8)
    backends = ["rgw", "moto"] if args.backend == "both" else [args.backend]
    runs: list[dict] = []
    for name in backends:
        backend = Backend(name, args)
        try:
            t0 = time.perf_counter()
            names = obj_names(spec, stored) if "obj" in tiers else []
            if "s3kv" in tiers:
                view, _ = h.primary_view(8, ROW_BYTES)
                writer = h.s3_tier(
                    view, spec, url=f"s3://{backend.bucket}/s3kv", endpoint_url=backend.url
                )
                names += [writer.uploader.keys.key_for(k) for k in stored]
                writer.shutdown()
            backend.put(names)
            print(
                f"[{name}] stored {len(names)} objects in {time.perf_counter() - t0:.0f}s",
                file=sys.stderr,
            )
            # vLLM's EngineCore freezes its startup heap (freeze_gc_heap) so that full
            # collections stay short; without it one run here took a 3.6 s GC pause.
            gc.collect()
            gc.freeze()
            for n in chains:
                for pct in present:
                    k = n * pct // 100
                    for r in range(args.repeat):
                        # Absent keys are fresh per run; the stored chain's prefix is shared.
                        chain = stored[:k] + h.keys(n - k, start=20_000_000 + 100_000 * r + n)
                        for kind in tiers:
                            res = run_one(kind, backend, spec, chain, args.step_ms / 1000)
                            res.update(
                                backend=name,
                                tier=kind,
                                chain=n,
                                present_pct=pct,
                                expected=k,
                                repeat=r,
                            )
                            runs.append(res)
                            ok = "" if res["hits"] == k else f" WRONG (expected {k})"
                            print(
                                f"[{name}] {kind:<4} n={n:<5} {pct:>3}% hits={res['hits']}"
                                f"{ok} HEADs={res['heads']} {res['seconds'] * 1000:.0f} ms "
                                f"(in batch_lookup {res['batch_lookup_seconds'] * 1000:.0f})",
                                file=sys.stderr,
                            )
                            if args.json:
                                save(args, runs)
        finally:
            backend.close()

    machine = _trust.machine(shared=args.trust["loaded"])
    doc = _trust.stamp({"rows": summarize(runs), "machine": machine}, args.trust)
    print(table(doc["rows"], args, doc))
    if args.chart:
        chart(doc["rows"], args.chart, args.delay_ms, doc)
    wrong = [r for r in runs if r["hits"] != r["expected"]]
    return 1 if wrong else 0


def save(args: argparse.Namespace, runs: list[dict]) -> None:

    args.json.parent.mkdir(parents=True, exist_ok=True)
    saved = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
             if k != "trust"}
    doc = {"args": saved, "machine": _trust.machine(shared=args.trust["loaded"]), "runs": runs,
           "rows": summarize(runs)}
    args.json.write_text(json.dumps(_trust.stamp(doc, args.trust), indent=1) + "\n")


def summarize(runs: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["backend"], r["chain"], r["present_pct"], r["tier"]), []).append(r)
    rows = []
    for (backend, n, pct, tier), rs in groups.items():
        rows.append(
            {
                "backend": backend,
                "chain": n,
                "present_pct": pct,
                "tier": tier,
                "hits": rs[0]["hits"],
                "correct": all(r["hits"] == r["expected"] for r in rs),
                "heads": max(r["heads"] for r in rs),
                "rounds": max(r.get("rounds", 1) for r in rs),
                "peak_in_flight": max(r["peak_in_flight"] for r in rs),
                "ms": statistics.median(r["seconds"] * 1000 for r in rs),
                "ms_max": max(r["seconds"] * 1000 for r in rs),
                "batch_lookup_ms": statistics.median(r["batch_lookup_seconds"] * 1000 for r in rs),
                "ms_runs": [round(r["seconds"] * 1000, 1) for r in rs],
            }
        )
        _trust.mark(rows[-1], {"ms": [r["seconds"] for r in rs]})
    return rows


def markdown(doc: dict) -> str:
    """A saved --json's table (for the docs)."""
    return table(doc["rows"], argparse.Namespace(**doc["args"]), doc)


def table(rows: list[dict], args: argparse.Namespace, doc: dict | None = None) -> str:
    out = [
        f"Lookup of one request's chain, cold caches, +{args.delay_ms:g} ms per request "
        f"(proxy), scheduler step every {args.step_ms:g} ms, median of {args.repeat}.",
        "",
        "| backend | chain | stored | tier | verdict | HEADs | rounds | peak in flight "
        "| ms to verdict | of which in `batch_lookup` |",
        "|---|--:|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        name = "s3kv `S3TierManager`" if r["tier"] == "s3kv" else "vLLM `obj` (NIXL)"
        rounds = str(r["rounds"]) if r["tier"] == "s3kv" else "1 batch"
        verdict = f"{r['hits']}" + ("" if r["correct"] else " (WRONG)")
        out.append(
            f"| {r['backend']} | {r['chain']:,} | {r['present_pct']}% | {name} | "
            f"{verdict} | {r['heads']:,} | {rounds} | {r['peak_in_flight']} | "
            f"{r['ms']:,.0f}{_trust.flag(r)} | {r['batch_lookup_ms']:,.0f} |"
        )
    notes = _trust.notes(doc, rows, _label) if doc is not None else []
    return "\n".join(out + (["", *notes] if notes else []))


def _label(r: dict) -> str:
    return f"{r['backend']} {r['chain']:,} {r['present_pct']}% {r['tier']}"


def chart(rows: list[dict], path: Path, delay_ms: float, doc: dict) -> None:
    """HEADs and time to verdict against chain length (half stored), log-log, per tier."""
    from matplotlib.ticker import NullLocator

    from scripts.charts import figure, lines, save

    heads: dict[str, tuple[list[float], list[float]]] = {}
    millis: dict[str, tuple[list[float], list[float]]] = {}
    for backend in ("rgw", "moto"):
        for tier in ("s3kv", "obj"):
            pts = sorted(
                (r["chain"], r["heads"], r["ms"])
                for r in rows
                if r["backend"] == backend and r["tier"] == tier and r["present_pct"] == 50
            )
            if pts:
                name = f"{'s3kv' if tier == 's3kv' else 'vLLM obj'} ({backend})"
                heads[name] = ([p[0] for p in pts], [p[1] for p in pts])
                millis[name] = ([p[0] for p in pts], [p[2] for p in pts])
    fig, (left, right) = figure(
        title=f"One request's lookup: s3kv's tier and vLLM's obj tier, +{delay_ms:g} ms a request",
        footer=(
            "Measured: a prompt's chain, half of it stored, cold caches; both tiers built by "
            "vLLM 0.33.0 and driven by its scheduler's _maximal_prefix_lookup; HEADs as the "
            "delaying proxy saw them.\n"
            f"Machine: {doc.get('machine') or _trust.machine()}. Command: python "
            "bench/bench_lookup_latency.py --json J --chart PNG (--from-json J redraws)."
            + "".join(f"\n{n}" for n in _trust.notes(doc, rows, _label, metrics=["ms"]))
        ),
        ncols=2,
        size=(11, 4.6),
    )
    xlabel = "chain length (blocks), half stored"
    lines(left, series=heads, xlabel=xlabel, ylabel="HEAD requests", title="requests")
    lines(right, series=millis, xlabel=xlabel, ylabel="ms to verdict", title="time to verdict")
    chains = sorted({x for xs, _ in heads.values() for x in xs})
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(chains, [f"{c:,}" for c in chains])
        ax.xaxis.set_minor_locator(NullLocator())
    save(fig, path)


if __name__ == "__main__":
    sys.exit(main())
