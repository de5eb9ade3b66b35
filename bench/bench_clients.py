"""Which client carries s3kv's blocks: the candidates side by side on one Ceph RGW.

    .venv/bin/python bench/bench_clients.py                       # the choice, ~25 min quiet
    .venv/bin/python bench/bench_clients.py --sizes 65536 --links rgw-http --rounds 1 \\
        --force-loaded --json /tmp/c.json                          # a smoke run
    .venv/bin/python bench/bench_clients.py --table docs/img/clients.json

Candidates (``--clients``): ``s3kv`` (this checkout: awscrt for every block request,
s3kv's rules on top), ``s3kv-own`` (the checkout ``--previous`` names, by default the
last commit with s3kv's own HTTP/1.1 client for blocks of 1 MiB and more: the kernel read
into the row, TLS through Python's ssl; awscrt below 1 MiB), ``obstore`` (object_store,
Rust), ``urllib3`` (readinto the row, botocore's SigV4) and ``boto3``. Each moves the same
blocks (GET into preallocated rows, PUT from them; each computes CRC32C over every block)
at ``--concurrency`` requests in flight, in a process of its own (bench/lib/client_worker.py:
its own CPU, and the stand-in EngineCore loop of bench/lib/engine_loop.py on its main
thread: how much of the interpreter the client leaves to the scheduler). Links: RGW 16
on loopback over HTTP and TLS. Rounds are interleaved (the client order rotates); tables
give medians with min-max. It refuses to start on a loaded machine (bench/lib/trust.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # s3kv, bench.lib and scripts from this checkout

from bench.lib import results  # noqa: E402
from bench.lib import trust as _trust  # noqa: E402

MiB = 1 << 20
PREVIOUS = "0651360"
"""The last commit whose blocks of 1 MiB and more went over s3kv's own HTTP client."""
SIZES = (64 << 10, 256 << 10, 2 * MiB, 8 * MiB, 32 * MiB)
CLIENTS = ("s3kv", "s3kv-own", "obstore", "urllib3", "boto3")


def blocks_of(size: int) -> int:
    """How many blocks a cell moves: about 128 MiB, at least 8 and at most 1,024."""
    return max(8, min(1024, (128 * MiB) // size))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--links", default="rgw-http,rgw-https")
    p.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="block bytes")
    p.add_argument("--clients", default=",".join(CLIENTS))
    p.add_argument("--ops", default="get,put")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--previous", default=PREVIOUS,
                   help="git revision of the s3kv-own candidate (default %(default)s)")
    p.add_argument("--json", type=Path, default=ROOT / "docs/img/clients.json")
    p.add_argument("--table", type=Path, metavar="JSON", help="only print a JSON's table")
    _trust.add_arguments(p)
    args = p.parse_args(argv)
    args.links = [x for x in args.links.split(",") if x]
    args.sizes = [int(x) for x in args.sizes.split(",")]
    args.clients = [x for x in args.clients.split(",") if x]
    args.ops = [x for x in args.ops.split(",") if x]
    return args


def previous_checkout(revision: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into),
                    revision], check=True, capture_output=True)
    return into


def _drop_puts(link: Any, bucket: str) -> None:
    """Delete what the round's PUTs wrote (under ``put/``)."""
    pages = link.admin.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="put/")
    for page in pages:
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            link.admin.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


def measure(spec: dict[str, Any], pythonpath: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": pythonpath, "AWS_EC2_METADATA_DISABLED": "true"}
    worker = HERE / "lib" / "client_worker.py"
    proc = subprocess.run([sys.executable, str(worker), json.dumps(spec)],
                          capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{spec['client']} {spec['op']} {spec['size']}: "
                           f"{proc.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run(args: argparse.Namespace, trust: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from bench.lib.links import links

    os.environ.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1"})
    results: dict[tuple[str, str, int, str], list[dict[str, Any]]] = {}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {c: str(ROOT) for c in args.clients}
        if "s3kv-own" in args.clients:
            paths["s3kv-own"] = str(previous_checkout(args.previous, Path(tmp) / "previous"))
        try:
            with links(args.links, memstore_bytes=6 << 30, first_byte_seconds=0,
                       connection_bytes_per_second=None) as found:
                for name in args.links:
                    link = found[name]
                    for size in args.sizes:
                        n = blocks_of(size)
                        bucket = link.bucket(f"c{size}")
                        data = np.random.default_rng(size).integers(0, 256, size, np.uint8)
                        keys = [f"blocks/{size}/{i:05d}.bin" for i in range(n)]
                        for key in keys:
                            link.admin.put_object(Bucket=bucket, Key=key, Body=data.tobytes())
                        for r in range(args.rounds):
                            order = args.clients[r % len(args.clients):] + \
                                args.clients[: r % len(args.clients)]
                            for client in order:
                                for op in args.ops:
                                    spec = {"client": client, "op": op, "size": size,
                                            "bucket": bucket, "concurrency": args.concurrency,
                                            **link.credentials(),
                                            "keys": keys if op == "get" else
                                            [f"put/{client}/{r}/{k}" for k in keys],
                                            "expect_seed": size}
                                    try:
                                        got = measure(spec, paths[client])
                                    except RuntimeError as exc:  # recorded, not fatal
                                        errors[f"{name} {op} {size} {client}"] = str(exc)[-300:]
                                        print(f"FAILED {exc}", file=sys.stderr, flush=True)
                                        continue
                                    got["mib_s"] = n * size / MiB / got["seconds"]
                                    got["cpu_s_per_gib"] = got["cpu_seconds"] / (n * size / 2**30)
                                    results.setdefault((name, op, size, client), []).append(got)
                                    print(f"{name} {op} {size >> 10} KiB {client}: "
                                          f"{got['mib_s']:.0f} MiB/s, "
                                          f"{got['cpu_s_per_gib']:.2f} s/GiB, "
                                          f"loop {got['steps_per_s']:.0f}/s", file=sys.stderr,
                                          flush=True)
                            _drop_puts(link, bucket)  # the GET set stays for the next round
                            if size > 4 * MiB:  # RGW keeps larger objects' tails: free them
                                link.collect_garbage()
                        link.empty(bucket)
                        link.collect_garbage()
        finally:
            if "s3kv-own" in args.clients:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(Path(tmp) / "previous")], capture_output=True)
    rows = []
    for (name, op, size, client), runs in results.items():
        row: dict[str, Any] = {"link": name, "op": op, "block_bytes": size, "client": client,
                               "blocks": blocks_of(size), "rounds": len(runs)}
        for metric in ("mib_s", "cpu_s_per_gib", "steps_per_s", "step_ms_p99"):
            values = [g.get(metric, 0.0) for g in runs]
            row[metric] = statistics.median(values)
            row[f"{metric}_min"], row[f"{metric}_max"] = min(values), max(values)
        rows.append(_trust.mark(row, {m: [g[m] for g in runs]
                                      for m in ("mib_s", "cpu_s_per_gib", "steps_per_s")}))

    meta = {"command": "bench/bench_clients.py " + " ".join(sys.argv[1:]),
            "previous": args.previous, "concurrency": args.concurrency, "errors": errors,
            "rounds": args.rounds, "cpus": os.cpu_count(), "python": platform.python_version(),
            "versions": _trust.versions("s3kv", "awscrt", "obstore", "urllib3", "boto3"),
            "machine": _trust.machine(shared=trust["loaded"])}
    return _trust.stamp({"meta": meta, "rows": rows}, trust)


def table(doc: dict[str, Any]) -> str:
    """MiB/s, client CPU s/GiB and the loop's steps/s per client, each cell the median
    (min-max) over the rounds, and each client's ratio to s3kv."""
    rows = doc["rows"]
    clients = [c for c in CLIENTS if any(r["client"] == c for r in rows)]
    out = ["| link | op | block | " + " | ".join(clients) + " |",
           "|---|---|--:|" + "---|" * len(clients)]
    cells = sorted({(r["link"], r["op"], r["block_bytes"]) for r in rows})
    for link, op, size in cells:
        by = {r["client"]: r for r in rows
              if (r["link"], r["op"], r["block_bytes"]) == (link, op, size)}
        base = by.get("s3kv")
        line = []
        for client in clients:
            r = by.get(client)
            if r is None:
                line.append("-")
                continue
            def mark(metric: str, row: dict[str, Any] = r) -> str:
                return _trust.MARK if metric in row.get("disagree", ()) else ""

            share = f", {r['mib_s'] / base['mib_s']:.2f}x" if base and client != "s3kv" else ""
            line.append(f"{r['mib_s']:.0f} MiB/s ({r['mib_s_min']:.0f}-{r['mib_s_max']:.0f})"
                        f"{mark('mib_s')}{share}<br>{r['cpu_s_per_gib']:.2f} s/GiB"
                        f"{mark('cpu_s_per_gib')}, loop {r['steps_per_s']:.0f}/s"
                        f"{mark('steps_per_s')}")
        kib = size >> 10
        label = f"{kib} KiB" if kib < 1024 else f"{kib >> 10} MiB"
        out.append(f"| {link} | {op} | {label} | " + " | ".join(line) + " |")
    failed = sorted({k.rsplit(" ", 1)[1] + " on " + k.split(" ")[0]
                     for k in doc["meta"].get("errors", {})})
    if failed:
        out.append("")
        out.append("Could not run (see the JSON's meta.errors): " + "; ".join(failed) + ".")
    legend = []
    if any(r.get("disagree") for r in rows):
        limit = doc.get("trust", {}).get("spread_limit", _trust.SPREAD_LIMIT)
        legend = [f"{_trust.MARK} after a figure: its rounds disagree by more than "
                  f"{limit:.0%} (max/min - 1)."]
    return "\n".join(out + _trust.notes(doc) + legend)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if results.from_saved(args, table):
        return 0
    trust = _trust.gate(args)
    started = time.monotonic()
    doc = run(args, trust)
    print(table(doc))
    print(f"wrote {results.write(doc, args.json)} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
