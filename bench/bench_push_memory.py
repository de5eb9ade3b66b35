"""Peak RSS and listings of ``s3kv push`` for 1,000 vs 10,000 small blocks.

Starts moto's server on 127.0.0.1, writes vLLM trees of 4 KiB blocks, and runs each push
(and a resumed re-run) as a child process: peak RSS from ``RUSAGE_CHILDREN`` (reset per
child by running each in a fresh intermediate process), ListObjectsV2 calls counted from
the ``S3KV_TRACE_FILE`` s3kv appends one JSON line per request to.

    .venv/bin/python bench/bench_push_memory.py [--counts 1000,10000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import boto3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # s3kv, bench.lib, scripts

from bench.lib import trust as _trust
from s3kv.naming.keys import KeyMapper, make_offload_key
from s3kv.naming.namespace import Namespace
from s3kv.ops.demo import embedded_s3
from s3kv.stores import LocalStore, PutOptions

BLOCK = 4096


def write_tree(root: Path, blocks: int) -> None:
    ns = Namespace(model_name="bench/model", tokens_per_hash=16, dtype="bfloat16")
    store, keys = LocalStore(root), KeyMapper(ns)
    store.put(keys.config_key(), ns.manifest_bytes(), PutOptions())
    for i in range(blocks):
        block_hash = i.to_bytes(8, "big") + b"\xa5" * 24
        store.put(keys.key_for(make_offload_key(block_hash, 0)), os.urandom(BLOCK), PutOptions())


def measured(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """(seconds, peak RSS in KiB) of one child, measured in a fresh intermediate process."""
    probe = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)"
    )
    out = subprocess.run([sys.executable, "-c", probe, *argv], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    assert out[2] == "0", f"push failed: {argv}"
    return float(out[0]), int(out[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="1000,10000")
    _trust.add_arguments(parser)
    args = parser.parse_args(argv)
    trust = _trust.gate(args)
    counts = [int(c) for c in args.counts.split(",")]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_REGION": "us-east-1"}
    with embedded_s3() as url, tempfile.TemporaryDirectory() as work:
        client = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                              aws_access_key_id="bench", aws_secret_access_key="bench")
        rows = []
        for n in counts:
            tree = Path(work, f"tree-{n}")
            write_tree(tree, n)
            bucket = f"bench-{n}"
            client.create_bucket(Bucket=bucket)
            for run in ("push", "re-run"):
                trace = Path(work, f"trace-{n}-{run}.jsonl")
                env["S3KV_TRACE_FILE"] = str(trace)
                argv = [sys.executable, "-m", "s3kv.cli", "push", str(tree), f"s3://{bucket}/kv",
                        "--endpoint-url", url]
                seconds, rss = measured(argv, env)
                ops = Counter(json.loads(line)["op"] for line in trace.read_text().splitlines())
                rows.append((n, run, seconds, rss, ops["ListObjectsV2"], ops["PutObject"],
                             ops["GetObject"] + ops["HeadObject"]))
    print(f"{'blocks':>7} {'run':>7} {'seconds':>8} {'peak RSS':>10} {'List':>5} {'Put':>6} "
          f"{'Get/Head':>8}")
    for n, run, seconds, rss, lists, puts, gets in rows:
        print(f"{n:>7} {run:>7} {seconds:>8.1f} {rss / 1024:>7.1f} MiB {lists:>5} {puts:>6} "
              f"{gets:>8}")
    for line in _trust.notes(_trust.stamp({}, trust)):
        print(line)


if __name__ == "__main__":
    main()
