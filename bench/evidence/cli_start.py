"""What an `s3kv` command costs before its work (issue 37): the console script's start and end.

    .venv/bin/python bench/evidence/cli_start.py     # quiet machine, about a minute

Two ways into the same code, interleaved, each a whole process timed from start to exit:

* ``console``: the ``s3kv`` console script as installed (``s3kv.cli:console``): Python's
  cyclic collector runs less often while botocore, boto3 and pydantic import, and the
  process ends without tearing its modules down once its output is flushed;
* ``main``: ``python -c 'from s3kv.cli import main; sys.exit(main())'``, the entry point
  before that (every module torn down at exit, the collector at its defaults).

Commands: ``s3kv pull`` of a bucket holding one block and its manifest (on a fresh Ceph
RGW 16 over loopback HTTP), of 1,024 blocks of 256 KiB, and ``s3kv --version``. Writes
``cli-start.json`` beside this file.
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

from bench.evidence._rounds import quiet_start, summarise, timed  # noqa: E402
from bench.lib import bulk_tree as tree  # noqa: E402
from bench.lib import trust  # noqa: E402
from tests.servers.rgw import RGWServer  # noqa: E402

ROUNDS = {"pull one block": 15, "pull 1,024 x 256 KiB": 5, "--version": 15}
ENTRIES = ("console", "main")
S3KV = str(Path(sys.executable).parent / "s3kv")
MAIN = [sys.executable, "-c", "import sys; from s3kv.cli import main; sys.exit(main())"]


def main() -> int:
    load = quiet_start()
    commit = trust.commit()
    work = Path(tempfile.mkdtemp(prefix="cli-start-", dir="/dev/shm"))
    caches = {"pull one block": (work / "one", 1), "pull 1,024 x 256 KiB": (work / "many", 1024)}
    for root, count in caches.values():
        tree.write_cache(root, 256 << 10, count, 5, "s3kv")
    server = RGWServer(memstore_bytes=2 << 30).start()
    runs: list[dict[str, Any]] = []
    try:
        url = server.endpoints()["http_endpoint"]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": server.access_key,
               "AWS_SECRET_ACCESS_KEY": server.secret_key, "AWS_REGION": "us-east-1",
               "HOME": str(work)}
        env.pop("PYTHONUNBUFFERED", None)  # as a console script runs
        admin = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                             aws_access_key_id=server.access_key,
                             aws_secret_access_key=server.secret_key)
        for i, (root, _) in enumerate(caches.values()):
            admin.create_bucket(Bucket=f"cli-start-{i}")
            subprocess.run([S3KV, "push", str(root), f"s3://cli-start-{i}/kv",
                            "--endpoint-url", url], env=env, check=True, capture_output=True)
        out = work / "pulled"
        for command, rounds in ROUNDS.items():
            if command == "--version":
                args = ["--version"]
            else:
                i = list(caches).index(command)
                args = ["pull", f"s3://cli-start-{i}/kv", str(out), "--endpoint-url", url]
            for r in range(rounds + 1):  # round 0: a warm-up, not counted
                order = ENTRIES if r % 2 else ENTRIES[::-1]
                for entry in order:
                    argv = ([S3KV] if entry == "console" else MAIN) + args
                    run = {"round": r, "warmup": r == 0, "command": command, "entry": entry,
                           **timed(argv, env, {"radosgw": server.pids["radosgw"]})}
                    if command != "--version":
                        assert not tree.compare(caches[command][0], out), (entry, command)
                        shutil.rmtree(out)
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    summary = summarise(runs, [(c, e) for c in ROUNDS for e in ENTRIES], ("command", "entry"),
                        ("seconds", "client_cpu_s"))
    for row in summary:
        base = next(s for s in summary if s["command"] == row["command"]
                    and s["entry"] == "main")
        row["seconds_over_main"] = round(row["seconds"] / base["seconds"], 2)
    doc = {"what": __doc__.split("\n\n")[0], "commit": commit, "rounds": ROUNDS,
           "load_average_1m_at_start": round(load, 2), "summary": summary, "runs": runs}
    (HERE / "cli-start.json").write_text(json.dumps(doc, indent=1) + "\n")
    for row in summary:
        print(f"{row['command']:22} {row['entry']:8} {row['seconds']:5.3f} s "
              f"[{row['seconds_range'][0]:.3f}-{row['seconds_range'][1]:.3f}] "
              f"({row['seconds_over_main']:.2f} of main's)  CPU {row['client_cpu_s']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
