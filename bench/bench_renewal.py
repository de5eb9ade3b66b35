"""Renewal benchmark: s3kv tier load-job throughput with renewal on vs off, interleaved;
with ``--drain N``, copies per block and drain time for N due blocks instead
(bench/lib/renewal_drain.py).

    .venv-vllm/bin/python bench/bench_renewal.py                          # RGW over HTTP
    .venv-vllm/bin/python bench/bench_renewal.py --servers moto --runs 9
    .venv-vllm/bin/python bench/bench_renewal.py --json docs/img/renewal.json
    .venv-vllm/bin/python bench/bench_renewal.py --drain 1000 --json docs/img/renewal-drain.json

Two s3kv tiers built by vLLM's own ``SecondaryTierFactory`` on one server, identical
but for ``renew_after``: ``on`` renews (``--renew-after`` seconds, 1 by default), ``off``
never does. At set-up each tier stores ``--runs`` + 1 sets of blocks (``--job-mib`` MiB
each, in blocks of ``--block-kib``), then waits until they are all due. Run ``r`` loads
set ``r`` with one load job per tier (tier order alternates run by run), so every
measured load of ``on`` makes its blocks due for renewal: their copies run in the
background while the next runs load. That is renewal's worst case for loads (in
service, a block is renewed at most once per ``renew_after``; here every block loaded
is). Loads are checked byte for byte.

* load MiB/s: wall time from ``submit_load`` to the poll that returns the job.
* ratio: median ``on`` over median ``off`` (the target is at least 0.97).
* copies: renewal requests ``on`` sent (one per block loaded, at most), and their
  failures; ``off`` must send none.

As vLLM's ``EngineCore``, the heap is frozen (``freeze_gc_heap()``) once the tiers exist.
Nothing is written to the docs: ``--json`` names where the results go.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # s3kv, bench.lib and scripts from this checkout

from bench.bench_vllm_tier import Server, servers  # noqa: E402
from bench.lib import results  # noqa: E402
from bench.lib import trust as _trust  # noqa: E402
from bench.lib.renewal_drain import drain_markdown, drain_rows  # noqa: E402
from bench.lib.tier_calls import cpu_seconds  # noqa: E402

KiB, MiB, GiB = 1024, 1024 * 1024, 1024**3
MODES = ("on", "off")


class Side:
    """One tier (renewal on or off) with its key sets stored."""

    def __init__(self, mode: str, server: Server, args: argparse.Namespace) -> None:
        import numpy as np

        from tests.vllm import harness as h

        self.mode, self.server = mode, server
        self.row_bytes = args.block_kib * KiB
        self.n = max(1, args.job_mib * MiB // self.row_bytes)
        self.sets = args.runs + 1  # one for the warm-up
        self.bucket = f"bench-renew-{mode}-{uuid.uuid4().hex[:8]}"
        server.client.create_bucket(Bucket=self.bucket)
        spec = h.spec(row_bytes=self.row_bytes, chunks=2 * self.n,
                      engine_id=f"bench-{self.bucket}")
        self.view, self.rows = h.primary_view(2 * self.n, self.row_bytes)
        self.tier = h.s3_tier(
            self.view, spec, url=f"s3://{self.bucket}/bench", endpoint_url=server.endpoint,
            concurrency=args.threads, max_attempts=8, access_key_id=server.access,
            secret_access_key=server.secret, ca_bundle=server.ca,
            renew_after=args.renew_after if mode == "on" else "off",
        )
        rng = np.random.default_rng(args.block_kib)
        self.keys = [h.keys(self.n, start=100_000 * (s + 1)) for s in range(self.sets)]
        for s, ks in enumerate(self.keys):  # store every set once, up front
            self.rows[: self.n] = rng.integers(-128, 128, (self.n, self.row_bytes), np.int8)
            self._wait(self.tier.submit_store, h.job(ks, range(self.n), load=False))
            self._expected = self.rows[: self.n].copy() if s == 0 else self._expected
        self.mib_s: list[float] = []
        self.cpu_s_gib: list[float] = []

    def _wait(self, submit: Any, job: Any) -> float:
        t0 = time.perf_counter()
        submit(job)
        while True:
            done = list(self.tier.get_finished_jobs())
            if done:
                assert [r.job_id for r in done] == [job.job_id] and done[0].success, done
                return time.perf_counter() - t0
            time.sleep(0.0005)

    def load(self, s: int, *, count: bool) -> None:
        from tests.vllm import harness as h

        self.rows[self.n :] = 0
        job = h.job(self.keys[s], range(self.n, 2 * self.n), load=True, req=f"load-{s}")
        c0 = cpu_seconds()
        seconds = self._wait(self.tier.submit_load, job)
        cpu = cpu_seconds() - c0
        assert self.rows[self.n :].any(), "a load job brought nothing"
        if s == 0:
            assert (self.rows[self.n :] == self._expected).all()
        if count:
            gib = self.n * self.row_bytes / GiB
            self.mib_s.append(gib * 1024 / seconds)
            self.cpu_s_gib.append(cpu / gib)

    def result(self) -> dict[str, Any]:
        renewer = self.tier.renewer
        return {
            "mode": self.mode, "server": self.server.name, "block_bytes": self.row_bytes,
            "blocks_per_job": self.n, "runs": len(self.mib_s),
            "load_mib_s": statistics.median(self.mib_s),
            "load_cpu_s_per_gib": statistics.median(self.cpu_s_gib),
            "load_mib_s_runs": [round(v, 1) for v in self.mib_s],
            "renewed": renewer.renewed if renewer else 0,
            "renewal_failures": renewer.failed if renewer else 0,
        }

    def close(self) -> None:
        if self.tier.renewer is not None:
            self.tier.renewer.flush(60)
        self.tier.shutdown()


def bench_server(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    sides = [Side(mode, server, args) for mode in MODES]
    from vllm.utils.gc_utils import freeze_gc_heap

    freeze_gc_heap()
    try:
        time.sleep(args.renew_after + 1.0)  # every stored block is due from now on
        for side in sides:
            side.load(0, count=False)  # warm-up (connections, first requests)
        for r in range(1, args.runs + 1):
            for side in sides if r % 2 else sides[::-1]:
                side.load(r, count=True)
    finally:
        results = {side.mode: side for side in sides}
        for side in sides:
            side.close()
    on, off = results["on"].result(), results["off"].result()
    assert off["renewed"] == 0, off
    row = {"server": server.name, "on": on, "off": off,
           "ratio": on["load_mib_s"] / off["load_mib_s"]}
    _trust.mark(row, {"on_load_mib_s": on["load_mib_s_runs"],
                      "off_load_mib_s": off["load_mib_s_runs"]})
    print(f"| {server.name:<9} | {args.block_kib:>5} KiB | on {on['load_mib_s']:>7.1f} MiB/s | "
          f"off {off['load_mib_s']:>7.1f} MiB/s | ratio {row['ratio']:.3f} | "
          f"copies {on['renewed']} ({on['renewal_failures']} failed) |", flush=True)
    return row


def _range(runs: list[float]) -> str:
    return f"{min(runs):,.0f}-{max(runs):,.0f}"


def markdown(doc: dict[str, Any]) -> str:
    """A saved --json's table (for the docs)."""
    if "drain" in doc:
        return drain_markdown(doc)
    meta = doc["meta"]
    out = [
        f"One load job of {meta['job_mib']} MiB in {meta['block_kib']:,} KiB blocks per tier "
        f"and run, {meta['threads']} I/O threads, renewal `on` (every block loaded is due) "
        f"vs `off`, median of {meta['runs']} interleaved runs (range).",
        "",
        "| server | on MiB/s | off MiB/s | on ÷ off | renewal copies (failed) |",
        "|---|--:|--:|--:|--:|",
    ]
    for r in doc["rows"]:
        on, off = r["on"], r["off"]
        out.append(
            f"| {r['server']} | {on['load_mib_s']:,.0f} ({_range(on['load_mib_s_runs'])}) | "
            f"{off['load_mib_s']:,.0f} ({_range(off['load_mib_s_runs'])}) | "
            f"{r['ratio']:.3f}{_trust.flag(r)} | {on['renewed']:,} ({on['renewal_failures']}) |")
    notes = _trust.notes(doc, doc["rows"], lambda r: r["server"])
    return "\n".join(out + (["", *notes] if notes else []))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", default="rgw-http", help="moto, rgw-http, rgw-https")
    p.add_argument("--runs", type=int, default=5, help="interleaved runs (median)")
    p.add_argument("--job-mib", type=int, default=32, help="MiB per load job")
    p.add_argument("--block-kib", type=int, default=1024, help="block size in KiB")
    p.add_argument("--threads", type=int, default=16, help="I/O threads of each tier")
    p.add_argument("--renew-after", type=float, default=1.0, help="seconds (tier 'on')")
    p.add_argument("--json", type=Path, help="write the results here (nothing by default)")
    p.add_argument("--drain", type=int, metavar="N",
                   help="measure copies per block and drain time for N due blocks instead")
    p.add_argument("--drain-block-kib", type=int, default=128, help="with --drain")
    p.add_argument("--drain-renew-after", type=float, default=100.0,
                   help="with --drain: seconds; 100 gives renewal the spread a day's "
                   "renew_after gives it (10 s)")
    _trust.add_arguments(p)
    args = p.parse_args(argv)
    trust = _trust.gate(args)
    os.environ.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1"})
    os.environ.pop("AWS_PROFILE", None)
    names = args.servers.split(",")
    with servers(names) as found:
        if args.drain:
            rows = [r for name in names for r in drain_rows(found[name], args)]
        else:
            rows = [bench_server(found[name], args) for name in names]
    if args.json:

        meta = {
            "command": "bench/bench_renewal.py " + " ".join(argv or sys.argv[1:]),
            "threads": args.threads, "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "versions": _trust.versions("vllm", "s3kv", "awscrt"), "machine": _trust.machine(),
        }
        if args.drain:
            meta.update(drain=args.drain, drain_block_kib=args.drain_block_kib,
                        drain_renew_after=args.drain_renew_after)
            doc: dict[str, Any] = {"meta": meta, "drain": rows}
        else:
            meta.update(runs=args.runs, job_mib=args.job_mib, block_kib=args.block_kib,
                        renew_after=args.renew_after)
            doc = {"meta": meta, "rows": rows}
        _trust.stamp(doc, trust)
        print(markdown(doc))
        print(f"wrote {results.write(doc, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
