"""s3kv's vLLM tier before and after a change: the same stores and loads, each tree in turn.

    .venv-vllm/bin/python bench/evidence/tier_before_after.py --before COMMIT --out NAME.json \
        --what "what the change is"     # quiet machine, about 15 minutes

``--before`` is a commit of s3kv (checked out in a temporary worktree); ``after`` is this
tree, or the commit ``--after`` names. Each round runs bench/bench_prompt_load.py (its
s3kv tier only, the I/O process beside the stand-in EngineCore loop, Ceph RGW over
loopback HTTP, an 8,192-token prompt at 32 and 8 MiB blocks unless ``--block-tokens``
says otherwise) once with each, in alternating order; the table is medians over the
rounds, with min-max. Each tree's I/O process gets its own environment defaults (no
``MALLOC_*_`` variable is passed down). Writes NAME.json beside this file.

Its runs so far:

* io-process-malloc.json: ``--before f2d2a27``, the I/O process raising glibc's mmap
  threshold to 64 MiB;
* put-prep-off-loop.json: ``--before da3f7cc --after c4d0b30``, a write's checksum and
  MD5 taken on the transfer's pool instead of on awscrt's event loop;
* io-process-trim.json: ``--before c4d0b30 --after f81f6f8``, the I/O process's trim
  threshold at 256 MiB beside its mmap threshold: no difference beyond the rounds'
  spread, so it was not kept;
* load-parts.json: ``--before 7217048 --after b8aced5``, a load's ranged requests at most
  one awscrt part (8 MiB): in the I/O process, whose mmap threshold already kept 32 MiB
  bodies on the heap, within the rounds' spread;
* io-process-no-mmap-threshold.json: ``--before 91e6f27 --after 08ca02c``, a trial
  commit (not kept) whose I/O process set no ``MALLOC_MMAP_THRESHOLD_``, bodies being at
  most 8 MiB since b8aced5: its loads' medians were slower at every size, so the setting
  stays.
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
FIELDS = ("load_s", "load_cpu_s_per_gib", "store_s", "store_cpu_s_per_gib")


def run(source: Path, out: Path, rounds: int, block_tokens: str) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["PYTHONPATH"] = str(source)
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_prompt_load.py"), "--links", "rgw-http",
         "--prompts", "8192", "--block-tokens", block_tokens, "--tiers", "s3kv", "--ceilings", "",
         "--rounds", str(rounds), "--warmup", "1", "--force-loaded", "--json", str(out)],
        check=True, env=env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return [r for r in json.loads(out.read_text())["rows"] if r.get("who") == "s3kv"]


def main() -> None:
    from bench.evidence import _rounds as rounds

    parser = rounds.before_after_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--block-tokens", default="256,64",
                        help="tokens per block (128 KiB each): 256,64 is 32 and 8 MiB")
    args = rounds.parse_before_after(parser)
    load = rounds.quiet_start(args.wait_quiet)
    runs: dict[str, dict[int, dict[str, list[float]]]] = {"before": {}, "after": {}}
    for name, tree, scratch in rounds.alternating(ROOT, args):
        for row in run(tree, scratch, args.per_run, args.block_tokens):
            cell = runs[name].setdefault(row["block_tokens"], {f: [] for f in FIELDS})
            for f in FIELDS:
                cell[f] += row[f"{f}_runs"]
    command = (f"bench/evidence/tier_before_after.py --before {args.before} "
               + (f"--after {args.after} " if args.after else "")
               + f"--block-tokens {args.block_tokens} --out {args.out} --what {args.what!r}")
    rounds.write_before_after(HERE / args.out, args, command, load, {
        name: {f"{tokens * 128 // 1024} MiB": cell for tokens, cell in sorted(cells.items())}
        for name, cells in runs.items()})  # fmt: skip


if __name__ == "__main__":
    main()
