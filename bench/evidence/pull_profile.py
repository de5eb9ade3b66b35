"""Where a pull's time goes, before and after a change (issue 37, point 2): one job, every
thread, measured three ways.

    .venv/bin/python bench/evidence/pull_profile.py --before REV   # quiet machine, ~3 min

The same cache (1,024 blocks of 256 KiB in vLLM's layout, pushed once) pulled from a
fresh Ceph RGW 16 over loopback HTTP by ``s3kv pull`` as users run it, from two trees of
this repository: this one (``after``) and ``REV`` checked out beside it (``before``);
every pulled tree compared with the cache byte for byte.

* **timed**: interleaved rounds after a warm-up, each pull a whole process (wall seconds,
  its CPU, radosgw's CPU), medians with their ranges;
* **syscalls**: one pull under ``strace -f -c`` per tree (counts only: strace slows the
  process, so its times are not kept): futex calls, the GIL and locks handed between
  threads, and all system calls, per block;
* **GIL**: one pull under ``py-spy record --gil`` per tree (1,000 samples a second of the
  thread holding the GIL, whatever thread it is): seconds of held GIL by where the thread
  was: imports, the main thread's own work, awscrt's threads calling back into Python,
  other Python threads (a pool's workers, timers), and native code holding the GIL.

Writes ``pull-profile.json`` beside this file. Needs strace (apt-get install strace) and
py-spy (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
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

BLOCK, BLOCKS = 256 << 10, 1024
ROUNDS = 5
PY_SPY = str(Path(sys.executable).parent / "py-spy")
RUNNER = """import sys
tree = sys.argv.pop(1)
# the tree asked for, not the one installed in editable mode
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, tree)
sys.argv[0] = "s3kv"
import s3kv
assert s3kv.__file__.startswith(tree), s3kv.__file__
from s3kv.cli import console
console()
"""


def where_held(frames: list[str]) -> str:
    """The area of one GIL sample, from its stack (outermost frame first)."""
    if not frames or not frames[0]:
        return "native code"
    if any("_find_and_load" in f for f in frames):
        return "imports"
    if "awscrt/s3.py" in frames[0]:
        return "awscrt callbacks"
    if frames[0].startswith(("_run_module_as_main", "<module>")):
        return "main thread"
    return "other threads"


def gil_areas(raw: Path) -> dict[str, float]:
    """Seconds of held GIL by area, from py-spy's raw output (1,000 samples a second)."""
    areas: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        areas[where_held(stack.split(";"))] += int(count)
    return {area: round(n / 1000, 3) for area, n in sorted(areas.items())}


def syscalls(summary: Path) -> dict[str, int]:
    """Calls by system call, from ``strace -c``'s table."""
    calls: dict[str, int] = {}
    for line in summary.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[-1] != "total" and fields[3].isdigit():
            calls[fields[-1]] = int(fields[3])
    return calls


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, metavar="REV",
                   help="the revision to compare with (checked out in a temp directory)")
    args = p.parse_args()
    if shutil.which("strace") is None or not Path(PY_SPY).exists():
        raise SystemExit("needs strace (apt-get install strace) and py-spy (the bench extra)")
    load = quiet_start()
    work = Path(tempfile.mkdtemp(prefix="pull-profile-", dir="/dev/shm"))
    before = work / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-f", "--detach", str(before),
                    args.before], check=True, capture_output=True)
    trees = {"before": str(before), "after": str(ROOT)}
    commits = {"before": subprocess.run(["git", "-C", str(before), "rev-parse", "--short",
                                         "HEAD"], capture_output=True, text=True).stdout.strip(),
               "after": trust.commit()}
    runner = work / "runner.py"
    runner.write_text(RUNNER)
    cache = work / "cache"
    tree.write_cache(cache, BLOCK, BLOCKS, 11, "s3kv")
    server = RGWServer(memstore_bytes=2 << 30).start()
    runs: list[dict[str, Any]] = []
    counts: dict[str, Any] = {}
    try:
        url = server.endpoints()["http_endpoint"]
        boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                     aws_access_key_id=server.access_key,
                     aws_secret_access_key=server.secret_key).create_bucket(Bucket="profile")
        env = {**os.environ, "AWS_ACCESS_KEY_ID": server.access_key,
               "AWS_SECRET_ACCESS_KEY": server.secret_key, "AWS_REGION": "us-east-1",
               "HOME": str(work)}
        env.pop("PYTHONUNBUFFERED", None)  # as a console script runs
        env.pop("S3KV_TRACE_FILE", None)
        subprocess.run([sys.executable, "-m", "s3kv.cli", "push", str(cache), "s3://profile/kv",
                        "--endpoint-url", url], env=env, check=True, capture_output=True)
        out = work / "pulled"

        def pull(name: str) -> list[str]:
            return [sys.executable, str(runner), trees[name], "pull", "s3://profile/kv",
                    str(out), "--endpoint-url", url]

        def pulled(name: str) -> None:
            problems = tree.compare(cache, out)
            if problems:
                raise SystemExit(f"{name}: " + "; ".join(problems))
            shutil.rmtree(out)

        for r in range(ROUNDS + 1):  # round 0: a warm-up, not counted
            for name in (("before", "after") if r % 2 else ("after", "before")):
                run = {"round": r, "warmup": r == 0, "tree": name,
                       **timed(pull(name), env, {"radosgw": server.pids["radosgw"]})}
                pulled(name)
                runs.append(run)
                print(json.dumps(run), flush=True)
        for name in trees:
            summary = work / f"strace-{name}.txt"
            subprocess.run(["strace", "-f", "-c", "-o", str(summary), *pull(name)], env=env,
                           check=True, capture_output=True)
            pulled(name)
            calls = syscalls(summary)
            raw = work / f"py-spy-{name}.txt"
            subprocess.run([PY_SPY, "record", "--gil", "-r", "1000", "--format", "raw", "-o",
                            str(raw), "--", *pull(name)], env=env, check=True,
                           capture_output=True)
            pulled(name)
            areas = gil_areas(raw)
            counts[name] = {
                "futex_per_block": round(calls.get("futex", 0) / BLOCKS, 1),
                "syscalls_per_block": round(sum(calls.values()) / BLOCKS, 1),
                "gil_held_s": areas, "gil_held_total_s": round(sum(areas.values()), 3),
            }
            print(name, json.dumps(counts[name]), flush=True)
    finally:
        server.stop()
        server.remove()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)],
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    summary_rows = summarise(runs, [("before",), ("after",)], ("tree",),
                             ("seconds", "client_cpu_s", "radosgw_cpu_s"))
    for row in summary_rows:
        row.update(commit=commits[row["tree"]], **counts[row["tree"]])
    doc = {"what": __doc__.split("\n\n")[0], "block_bytes": BLOCK, "blocks": BLOCKS,
           "rounds": ROUNDS, "load_average_1m_at_start": round(load, 2),
           "summary": summary_rows, "runs": runs}
    (HERE / "pull-profile.json").write_text(json.dumps(doc, indent=1) + "\n")
    for row in summary_rows:
        print(f"{row['tree']:6} {row['commit']} {row['seconds']:5.3f} s "
              f"[{row['seconds_range'][0]:.3f}-{row['seconds_range'][1]:.3f}]  CPU "
              f"{row['client_cpu_s']:.3f} s  futex/block {row['futex_per_block']}  "
              f"GIL held {row['gil_held_total_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
