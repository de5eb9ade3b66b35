"""``s3kv push`` and ``pull`` before and after a change: the same copies, each tree in turn.

    .venv/bin/python bench/evidence/push_before_after.py --before COMMIT --out NAME.json \
        --what "what the change is"     # quiet machine, about 15 minutes

``--before`` is a commit of s3kv (checked out in a temporary worktree); ``after`` is this
tree, or the commit ``--after`` names. Each round runs bench/bench_bulk.py (s3kv only,
Ceph RGW over loopback HTTP, caches of 256 KiB and 32 MiB blocks unless ``--caches``
says otherwise) once with each tree's s3kv, in alternating order; the table is medians
over the rounds' pushes and pulls, wall and CPU seconds of the whole ``s3kv`` process,
with min-max. Writes NAME.json beside this file.

Its runs so far:

* push-prep-on-pool.json: ``--before 7ba7ea3 --after db3e6e4`` (a trial commit, not
  kept), a pushed file opened, mapped and checksummed (its MD5 too, on Ceph RGW 16) on
  the sync's pool instead of on the sync's thread (every block is a job of its own,
  started there as a slot frees; not on awscrt's event loop): pushes slower, 3.635 s
  (3.42-4.29) against 3.175 s (3.10-8.49) at 256 KiB, 2.98 s (2.93-3.61) against
  2.884 s (2.77-2.99) at 8 MiB, and more CPU at both, so it was undone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
FIELDS = ("seconds", "cpu_s")


def run(source: Path, out: Path, rounds: int, caches: str) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_bulk.py"), "--tools", "s3kv",
         "--links", "rgw-http", "--caches", caches, "--writer", "s3kv", "--rounds", str(rounds),
         "--warmup", "1", "--force-loaded", "--json", str(out)],
        check=True, env=env, stdout=subprocess.DEVNULL,  # its log (stderr) shows progress
    )  # fmt: skip
    return [r for r in json.loads(out.read_text())["runs"]
            if r["tool"] == "s3kv" and not r["warmup"] and "error" not in r]  # fmt: skip


def label(block_bytes: int) -> str:
    return f"{block_bytes >> 10} KiB" if block_bytes < 1 << 20 else f"{block_bytes >> 20} MiB"


def main() -> None:
    from bench.evidence import _rounds as rounds

    parser = rounds.before_after_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--caches", default="256K:256M,32M:512M",
                        help="BLOCK:TOTAL of each cache (bench_bulk.py's --caches)")
    args = rounds.parse_before_after(parser)
    load = rounds.quiet_start(args.wait_quiet)
    runs: dict[str, dict[tuple[int, str], dict[str, list[float]]]] = {"before": {}, "after": {}}
    for name, tree, scratch in rounds.alternating(ROOT, args):
        for row in run(tree, scratch, args.per_run, args.caches):
            cell = runs[name].setdefault((row["block_bytes"], row["direction"]),
                                         {f: [] for f in FIELDS})
            for f in FIELDS:
                cell[f].append(row[f])
    command = (f"bench/evidence/push_before_after.py --before {args.before} "
               + (f"--after {args.after} " if args.after else "")
               + f"--caches {args.caches} --out {args.out} --what {args.what!r}")
    rounds.write_before_after(HERE / args.out, args, command, load, {
        name: {f"{label(size)} {direction}": cell
               for (size, direction), cell in sorted(cells.items())}
        for name, cells in runs.items()})  # fmt: skip


if __name__ == "__main__":
    main()
