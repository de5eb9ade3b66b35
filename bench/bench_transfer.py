"""Transfer benchmark: s3kv against boto3, s3transfer, obstore and awscrt on one server.

    python bench/bench_transfer.py                    # full: 512 x 1 MiB, 2,000 x 64 KiB
    python bench/bench_transfer.py --quick            # smaller, for a smoke run
    python bench/bench_transfer.py --json out.json --repeat 5
    python bench/bench_transfer.py --endpoint-url https://127.0.0.1:7480 \\
        --ca-bundle ca.pem --access-key AK --secret-key SK --label "Ceph RGW (TLS)"

Without ``--endpoint-url`` a moto server is started in its own process on 127.0.0.1 and
a free port, and stopped (by its PID) at the end. Every row (client x size x direction)
runs in its own subprocess (``bench/_workers.py``) so "client CPU" is that process's own
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
import platform
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_workers.py"
sys.path.insert(0, str(HERE))

from _clients import CLIENTS  # noqa: E402  (one list of rows for the runner and workers)

MiB = 1024 * 1024
GiB = 1024 * MiB
PREFIX = "bench"


# -- server ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """moto's HTTP server in its own process on loopback."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"moto server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise SystemExit("moto server did not come up within 30s")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


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


# -- summary ---------------------------------------------------------------------------


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for label, count, size in data["workloads"]:
        for op in ("upload", "download"):
            for client in data["clients"]:
                runs = data["runs"].get(f"{label}|{op}|{client}", [])
                good = [
                    x
                    for x in runs
                    if not x.get("error")
                    and x.get("failed", 0) == 0
                    and x.get("mismatched", 0) == 0
                ]
                row: dict[str, Any] = {
                    "size": label,
                    "op": op,
                    "client": client,
                    "runs": len(runs),
                    "good": len(good),
                }
                errors = [
                    x.get("error") or f"failed={x.get('failed')} mismatched={x.get('mismatched')}"
                    for x in runs
                    if x not in good
                ]
                if errors:
                    row["errors"] = errors
                if good:
                    seconds = statistics.median(x["seconds"] for x in good)
                    cpu = statistics.median(x["cpu"] for x in good)
                    row.update(
                        seconds=seconds,
                        objects_per_s=count / seconds,
                        mib_per_s=count * size / seconds / MiB,
                        cpu=cpu,
                        cpu_per_gib=cpu / (count * size / GiB),
                        all_seconds=[round(x["seconds"], 3) for x in good],
                    )
                    if any("server_cpu" in x for x in good):
                        row["server_cpu"] = statistics.median(
                            x.get("server_cpu", 0.0) for x in good
                        )
                rows.append(row)
    lookups = []
    for client in ("s3kv", "naive-head"):
        runs = [x for x in data["runs"].get(f"lookup|{client}", []) if not x.get("error")]
        if runs:
            lookups.append(
                {
                    "client": client,
                    "found": runs[0]["found"],
                    "rounds": max(x["rounds"] for x in runs),
                    "requests": max(x["requests"] for x in runs),
                    "seconds": statistics.median(x["seconds"] for x in runs),
                    "cpu": statistics.median(x["cpu"] for x in runs),
                }
            )
    return {"rows": rows, "lookups": lookups}


def render(summary: dict[str, Any], args: argparse.Namespace, label: str) -> str:
    rows = summary["rows"]
    out = []
    has_server = any("server_cpu" in r for r in rows)
    head = [
        "size",
        "direction",
        "client",
        "objects/s",
        "MiB/s",
        "client CPU s",
        "CPU s/GiB",
        "s3kv throughput x",
    ]
    if has_server:
        head.append("server CPU s")
    out.append(
        f"Server: **{label}**; concurrency {args.concurrency} for every concurrent "
        f"client; median of {args.repeat} runs.\n"
    )
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|")
    checks = []
    for size in dict.fromkeys(r["size"] for r in rows):
        for op in ("upload", "download"):
            group = [r for r in rows if r["size"] == size and r["op"] == op]
            ours = next((r for r in group if r["client"] == "s3kv" and "mib_per_s" in r), None)
            for r in group:
                if "mib_per_s" not in r:
                    cells = [size, op, r["client"], "ERROR", "", "", "", ""]
                    if has_server:
                        cells.append("")
                    out.append("| " + " | ".join(cells) + " |")
                    continue
                ratio = f"{ours['mib_per_s'] / r['mib_per_s']:.2f}" if ours else "-"
                name = f"**{r['client']}**" if r["client"] == "s3kv" else r["client"]
                cells = [
                    size,
                    op,
                    name,
                    f"{r['objects_per_s']:.0f}",
                    f"{r['mib_per_s']:.1f}",
                    f"{r['cpu']:.2f}",
                    f"{r['cpu_per_gib']:.2f}",
                    ratio,
                ]
                if has_server:
                    cells.append(f"{r.get('server_cpu', 0):.2f}")
                out.append("| " + " | ".join(cells) + " |")
            others = [r for r in group if r["client"] != "s3kv" and "mib_per_s" in r]
            measured = [r for r in group if "mib_per_s" in r]
            if ours and others:
                best = max(others, key=lambda r: r["mib_per_s"])
                low = min(measured, key=lambda r: r["cpu_per_gib"])
                ok_t = ours["mib_per_s"] >= best["mib_per_s"]
                ok_c = ours["cpu_per_gib"] <= 1.5 * low["cpu_per_gib"]
                same = next((r for r in others if r["client"] == "awscrt-checked"), None)
                checks.append(
                    f"- {size} {op}: s3kv throughput >= best other row "
                    f"({ours['mib_per_s']:.1f} vs {best['client']} {best['mib_per_s']:.1f} MiB/s): "
                    f"**{'PASS' if ok_t else 'FAIL'}**; s3kv CPU/GiB <= 1.5x lowest "
                    f"({ours['cpu_per_gib']:.2f} vs 1.5 x {low['client']} {low['cpu_per_gib']:.2f} "
                    f"= {1.5 * low['cpu_per_gib']:.2f}): **{'PASS' if ok_c else 'FAIL'}**"
                    + (
                        f"; against awscrt doing the same checks by hand: "
                        f"{ours['mib_per_s'] / same['mib_per_s']:.2f}x"
                        if same
                        else ""
                    )
                )
            elif not ours:
                checks.append(f"- {size} {op}: s3kv row missing or failed: **FAIL**")
    out.append("")
    out.extend(checks)
    if summary["lookups"]:
        out.append("")
        out.append(
            f"Lookup: a {args.chain:,}-block chain, first {args.chain_present:,} present "
            "(cold presence cache).\n"
        )
        out.append("| method | found | round trips | requests | wall ms | client CPU ms |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for x in summary["lookups"]:
            name = (
                "s3kv `lookup`"
                if x["client"] == "s3kv"
                else "naive HEAD loop (stops at first miss)"
            )
            out.append(
                f"| {name} | {x['found']} | {x['rounds']} | {x['requests']} | "
                f"{x['seconds'] * 1000:.0f} | {x['cpu'] * 1000:.0f} |"
            )
        ours = next((x for x in summary["lookups"] if x["client"] == "s3kv"), None)
        if ours:
            ok = (
                ours["rounds"] <= 24
                and ours["requests"] <= 100
                and ours["found"] == args.chain_present
            )
            out.append("")
            out.append(
                f"- lookup: found {ours['found']} (expected {args.chain_present}), "
                f"{ours['rounds']} round trips <= 24, {ours['requests']} requests <= 100 "
                f"(naive: {args.chain:,} for every key, or {args.chain_present + 1:,} "
                f"stopping at the first miss): **{'PASS' if ok else 'FAIL'}**"
            )
    errors = [r for r in rows if r.get("errors")]
    if errors:
        out.append("")
        for r in errors:
            out.append(f"- errors in {r['size']} {r['op']} {r['client']}: {r['errors'][0]}")
    return "\n".join(out)


def notes(args: argparse.Namespace) -> str:

    versions = {}
    for mod in ("boto3", "botocore", "s3transfer", "obstore", "awscrt", "moto"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = "?"
    checksum = (
        "boto3 defaults (boto3 >= 1.36 adds a CRC32 checksum to every PUT and "
        "validates response checksums when present)"
        if args.boto3_checksum == "default"
        else "boto3 rows with request/response checksums `when_required`"
    )
    return (
        f"Notes: {checksum}; boto3-threads/s3transfer get "
        f"`max_pool_connections={args.concurrency}` "
        f"(boto3's default pool is 10). s3kv sends its own CRC32C (metadata + S3 checksum header) "
        f"and verifies it on download; obstore and awscrt send no checksum, and their PUTs "
        f"are not create-only. awscrt-checked is awscrt doing by hand what s3kv does per "
        f"block (CRC32C metadata + S3 checksum header, `If-None-Match: *`, the block tag; "
        f"the CRC32C verified on download). s3transfer sends "
        f"`Expect: 100-continue` (file-like bodies); the others do not. "
        + (
            "moto's server (werkzeug) answers every request with `Connection: close`, so every "
            "client opens one TCP connection per request, and it is single-process Python: "
            "the server, not the client, bounds throughput here. "
            if not args.endpoint_url
            else ""
        )
        + f"Client CPU = the "
        f"worker process's user+sys over the timed region. {os.cpu_count()} CPUs shared with "
        f"the server{' and other jobs' if args.shared_note else ''}: numbers are noisy. "
        f"Python {platform.python_version()}, "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f". Command: `python bench/bench_transfer.py {' '.join(sys.argv[1:])}`"
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
    p.add_argument("--profile", default="s3kv", help="clients to cProfile (with --profile-dir)")
    p.add_argument(
        "--profile-dir",
        help="also run --profile clients once more under cProfile (all threads), "
        "writing .prof files here; these runs are not in the table",
    )
    p.add_argument("--timeout", type=float, default=900, help="per row, seconds")
    p.add_argument("--shared-note", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
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
    table = render(summary, args, label)
    print(table)
    print()
    print(notes(args))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "label": label,
                    "argv": sys.argv[1:],
                    "args": vars(args),
                    "summary": summary,
                    "runs": data["runs"],
                    "table": table,
                },
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
