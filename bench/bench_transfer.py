"""Transfer benchmark: s3kv against boto3, s3transfer, obstore and awscrt on one server.

    python bench/bench_transfer.py                    # full: 512 x 1 MiB, 2,000 x 64 KiB
    python bench/bench_transfer.py --quick            # smaller, for a smoke run
    python bench/bench_transfer.py --json out.json --repeat 5
    python bench/bench_transfer.py --endpoint-url https://127.0.0.1:7480 \\
        --ca-bundle ca.pem --access-key AK --secret-key SK --label "Ceph RGW (TLS)"

Without ``--endpoint-url`` a moto server is started in its own process on 127.0.0.1 and
a free port, and stopped (by its PID) at the end. Every row (client x size x direction)
runs in its own subprocess (``bench/lib/workers.py``) so "client CPU" is that process's own
rusage over the timed region only (imports, client setup and payload generation are
excluded). Each upload row writes into a fresh bucket; the download row of the same
client then reads those objects back (into preallocated numpy rows for s3kv, into bytes
for the others) and a sample of payloads is compared with what was uploaded. Rows are
repeated ``--repeat`` times, interleaved between clients (the order rotates each
repeat), and the median is reported.

Lookup: a 2,048-block chain whose first 1,500 blocks exist; s3kv's ``lookup`` (round
trips and requests it reports) against a naive HEAD loop that stops at the first miss.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKER = HERE / "lib" / "workers.py"
sys.path.insert(0, str(HERE.parent))  # s3kv, bench.lib and scripts from this checkout

from bench.lib import results  # noqa: E402
from bench.lib import trust as _trust  # noqa: E402
from bench.lib.clients import CLIENTS  # noqa: E402  (one list of rows for the runner and workers)
from bench.lib.moto_server import MotoServer  # noqa: E402
from bench.lib.transfer_report import chart, markdown, notes, render, summarize  # noqa: E402

MiB = 1024 * 1024
GiB = 1024 * MiB
PREFIX = "bench"


# -- driver ----------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.server: MotoServer | None = None
        if args.endpoint_url:
            self.endpoint = args.endpoint_url
        else:
            self.server = MotoServer()
            self.endpoint = self.server.url
        self.base_spec = {
            "endpoint": self.endpoint,
            "region": args.region,
            "access_key": args.access_key,
            "secret_key": args.secret_key,
            "ca_bundle": args.ca_bundle,
            "concurrency": args.concurrency,
            "prefix": PREFIX,
            "samples": args.samples,
            "boto3_checksum": args.boto3_checksum,
        }
        import boto3
        from botocore.config import Config

        self.admin = boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=args.region,
            aws_access_key_id=args.access_key,
            aws_secret_access_key=args.secret_key,
            verify=args.ca_bundle or None,
            config=Config(s3={"addressing_style": "path"}),
        )
        self.run_id = uuid.uuid4().hex[:8]

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()

    def bucket(self, name: str) -> str:
        bucket = f"s3kv-bench-{self.run_id}-{name}"[:63].rstrip("-").lower()
        kwargs: dict[str, Any] = {"Bucket": bucket}
        if self.args.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.args.region}
        self.admin.create_bucket(**kwargs)
        return bucket

    def drop(self, bucket: str) -> None:
        paginator = self.admin.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket):
            keys: list[Any] = [{"Key": o["Key"]} for o in page.get("Contents", ())]
            if keys:
                self.admin.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        self.admin.delete_bucket(Bucket=bucket)

    def worker(self, **spec: Any) -> dict[str, Any]:
        full = {**self.base_spec, **spec}
        server_cpu0 = self.server.cpu_seconds() if self.server else None
        proc = subprocess.run(
            [sys.executable, str(WORKER), json.dumps(full)],
            capture_output=True,
            text=True,
            timeout=self.args.timeout,
        )
        lines = proc.stdout.strip().splitlines()
        try:
            result: dict[str, Any] = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            result = {"error": f"worker exited {proc.returncode}: {proc.stderr.strip()[-800:]}"}
        if "error" in result and result["error"] and proc.stderr.strip():
            result["stderr"] = proc.stderr.strip()[-2000:]
        if server_cpu0 is not None and self.server is not None:
            result["server_cpu"] = self.server.cpu_seconds() - server_cpu0
        return result

    def run(self) -> dict[str, Any]:
        a = self.args
        workloads = [
            ("1 MiB", a.large_count, a.large_size),
            ("64 KiB", a.small_count, a.small_size),
        ]
        if a.small_size != 64 * 1024 or a.large_size != MiB:
            workloads = [
                (human(a.large_size), a.large_count, a.large_size),
                (human(a.small_size), a.small_count, a.small_size),
            ]
        clients = [c for c in a.clients.split(",") if c]
        runs: dict[str, list[dict[str, Any]]] = {}
        lookup_bucket = None
        if not a.skip_lookup:
            lookup_bucket = self.bucket("lookup")
            res = self.worker(
                op="populate",
                client="s3kv",
                bucket=lookup_bucket,
                seed=7,
                count=a.chain_present,
                size=a.small_size,
            )
            log(f"lookup setup: {res}")
        for r in range(a.repeat):
            for label, count, size in workloads:
                order = clients[r % len(clients) :] + clients[: r % len(clients)]
                for client in order:
                    seed = 1000 * r + size % 997
                    bucket = self.bucket(f"{client}-{count}-{r}")
                    spec = dict(client=client, bucket=bucket, count=count, size=size, seed=seed)
                    for op in ("upload", "download"):
                        res = self.worker(op=op, **spec)
                        res["repeat"] = r
                        runs.setdefault(f"{label}|{op}|{client}", []).append(res)
                        log(
                            f"[{r + 1}/{a.repeat}] {label:>6} {op:<8} {client:<13} "
                            + brief(res, count, size)
                        )
                    self.drop(bucket)
            if lookup_bucket is not None:
                for client in ["s3kv", "naive-head"] if r % 2 == 0 else ["naive-head", "s3kv"]:
                    res = self.worker(
                        op="lookup", client=client, bucket=lookup_bucket, seed=7, chain=a.chain
                    )
                    res["repeat"] = r
                    runs.setdefault(f"lookup|{client}", []).append(res)
                    log(f"[{r + 1}/{a.repeat}] lookup {client:<10} {res}")
        if lookup_bucket is not None:
            self.drop(lookup_bucket)
        if a.profile_dir:  # extra runs under cProfile, kept out of the medians
            Path(a.profile_dir).mkdir(parents=True, exist_ok=True)
            for label, count, size in workloads:
                for client in [c for c in a.profile.split(",") if c]:
                    bucket = self.bucket(f"prof-{client}-{count}")
                    for op in ("upload", "download"):
                        profile = str(Path(a.profile_dir) / f"{client}-{op}-{count}x{size}.prof")
                        res = self.worker(
                            op=op,
                            profile=profile,
                            client=client,
                            bucket=bucket,
                            count=count,
                            size=size,
                            seed=99,
                        )
                        log(
                            f"[profiled] {label:>6} {op:<8} {client:<13} {brief(res, count, size)}"
                            f" -> {profile}"
                        )
                    self.drop(bucket)
        return {"workloads": workloads, "clients": clients, "runs": runs}


def human(size: int) -> str:
    return f"{size // MiB} MiB" if size % MiB == 0 else f"{size // 1024} KiB"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def brief(res: dict[str, Any], count: int, size: int) -> str:
    if res.get("error"):
        return f"ERROR {res['error']}"
    s = res["seconds"]
    extra = (
        f" verified {res.get('verified')}/{res.get('verified', 0) + res.get('mismatched', 0)}"
        if "verified" in res
        else ""
    )
    return (
        f"{s:7.2f}s {count / s:8.1f} obj/s {count * size / s / MiB:7.1f} MiB/s "
        f"cpu {res['cpu']:.2f}s server {res.get('server_cpu', 0):.2f}s{extra}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="64 x 1 MiB and 256 x 64 KiB, 1 repeat")
    p.add_argument("--large-count", type=int, default=512)
    p.add_argument("--large-size", type=int, default=MiB)
    p.add_argument("--small-count", type=int, default=2000)
    p.add_argument("--small-size", type=int, default=64 * 1024)
    p.add_argument("--chain", type=int, default=2048)
    p.add_argument("--chain-present", type=int, default=1500)
    p.add_argument("--skip-lookup", action="store_true")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset")
    p.add_argument("--samples", type=int, default=16, help="downloaded payloads compared")
    p.add_argument(
        "--boto3-checksum",
        choices=("default", "when_required"),
        default="default",
        help="boto3 rows' flexible checksums (RGW over TLS rejects the default)",
    )
    p.add_argument("--endpoint-url", help="use this server instead of starting moto")
    p.add_argument("--ca-bundle", help="CA bundle for an https endpoint")
    p.add_argument("--access-key", default=os.environ.get("AWS_ACCESS_KEY_ID", "testing"))
    p.add_argument("--secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"))
    p.add_argument("--region", default=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    p.add_argument("--label", help="the server's name in the table")
    p.add_argument("--json", help="write runs and summary here")
    p.add_argument("--chart", help="draw MiB/s and CPU s/GiB per client and size here (PNG)")
    p.add_argument("--profile", default="s3kv", help="clients to cProfile (with --profile-dir)")
    p.add_argument(
        "--profile-dir",
        help="also run --profile clients once more under cProfile (all threads), "
        "writing .prof files here; these runs are not in the table",
    )
    p.add_argument("--timeout", type=float, default=900, help="per row, seconds")
    p.add_argument("--command", help="how to rerun this, for the chart (default: this command)")
    p.add_argument("--redraw", metavar="JSON", help="only draw --chart from a saved --json")
    p.add_argument("--table", metavar="JSON", help="only print a saved --json's table")
    _trust.add_arguments(p)
    args = p.parse_args(argv)
    if args.redraw:
        return redraw(args.redraw, args.chart or str(Path(args.redraw).with_suffix(".png")))
    if results.from_saved(args, markdown):
        return 0
    trust = _trust.gate(args)
    if args.quick:
        args.large_count, args.small_count = min(args.large_count, 64), min(args.small_count, 256)
        if "--repeat" not in " ".join(sys.argv):
            args.repeat = 1
    label = args.label or (
        f"external {args.endpoint_url}"
        if args.endpoint_url
        else "moto server (own process, 127.0.0.1)"
    )
    bench = Bench(args)
    try:
        data = bench.run()
    finally:
        bench.close()
    summary = summarize(data)
    table = render(summary, args, label, trust=_trust.stamp({}, trust))
    print(table)
    print()
    print(notes(args))
    result = _trust.stamp({
        "label": label,
        "argv": sys.argv[1:],
        "command": args.command or "python bench/bench_transfer.py " + " ".join(sys.argv[1:]),
        "args": vars(args),
        "machine": _trust.machine(shared=trust["loaded"]),
        "summary": summary,
        "runs": data["runs"],
        "table": table,
    }, trust)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    if args.chart:
        log(f"chart: {chart(result, args.chart)}")
    return 0


def redraw(path: str, chart_path: str) -> int:
    """Draw the chart again from a saved --json (same numbers, new look)."""
    result = json.loads(Path(path).read_text())
    log(f"chart: {chart(result, chart_path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
