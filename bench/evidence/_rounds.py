"""What the evidence scripts share: a child process timed whole, radosgw's CPU beside it,
and medians with their ranges over the counted rounds."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.lib import trust


def quiet_start(patience: float = 600.0) -> float:
    """bench/lib/trust.py's gate: wait up to ``patience`` seconds for the 1-minute load
    average to fall under its limit, else stop unmeasured (exit 2); the load average at
    the start, which the JSON records."""
    record = trust.gate(argparse.Namespace(wait_quiet=patience, force_loaded=False))
    return float(record["load_average_1m"])


@contextmanager
def trees(root: Path, before: str, after: str = "") -> Iterator[dict[str, Path]]:
    """The s3kv trees a before/after run compares: ``before`` (a commit, checked out in a
    temporary worktree) and ``after`` (``root`` as it is, or the commit ``after`` names),
    each with its modules compiled (no run compiles them in its own processes). The
    worktrees are removed at the end."""
    with tempfile.TemporaryDirectory() as tmp:
        found = {"before": Path(tmp) / "before", "after": root}
        if after:
            found["after"] = Path(tmp) / "after"
        made = []
        try:
            for name, commit in (("before", before), ("after", after)):
                if commit:
                    subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach",
                                    str(found[name]), commit], check=True,
                                   capture_output=True)  # fmt: skip
                    made.append(found[name])
            for tree in found.values():
                subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "s3kv")],
                               check=True)  # fmt: skip
            yield found
        finally:
            for tree in made:
                subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force",
                                str(tree)], check=False)  # fmt: skip


def summary(values: list[float]) -> dict[str, float]:
    """Median, min and max, rounded to 3 places, as the before/after JSONs keep them."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}  # fmt: skip


def before_after_parser(description: str) -> argparse.ArgumentParser:
    """The options every before/after run takes (its own are added by the caller)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--before", required=True, help="the commit to compare this tree with")
    parser.add_argument("--after", default="",
                        help="the commit measured as after (default: this tree, as it is)")
    parser.add_argument("--out", required=True, help="the JSON's name, beside this script")
    parser.add_argument("--what", required=True, help="what the change is, for the JSON")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--per-run", type=int, default=2, help="bench rounds per run")
    parser.add_argument("--wait-quiet", type=float, default=600.0,
                        help="wait up to this long for the load average to drop under 1")
    return parser


def parse_before_after(parser: argparse.ArgumentParser) -> argparse.Namespace:
    args = parser.parse_args()
    if Path(args.out).name != args.out or not args.out.endswith(".json"):
        parser.error("--out is a file name ending in .json (it is written beside this script)")
    return args


def alternating(root: Path, args: argparse.Namespace) -> Iterator[tuple[str, Path, Path]]:
    """Each round's runs, ``(name, tree, scratch JSON path)``, before and after in turn,
    the order alternating by round; the trees and scratch files exist while iterating."""
    with trees(root, args.before, args.after) as tree, tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for name in (["before", "after"] if i % 2 == 0 else ["after", "before"]):
                yield name, tree[name], Path(tmp) / f"{name}-{i}.json"
                print(f"round {i + 1}: {name} done", flush=True)


def write_before_after(path: Path, args: argparse.Namespace, command: str, load: float,
                       runs: dict[str, dict[str, dict[str, list[float]]]]) -> None:
    """The JSON of a before/after run (``runs``: tree, then cell label, then field, its
    values) at ``path``, and its table printed."""
    doc = {
        "what": args.what,
        "command": command,
        "after": args.after or trust.commit(),
        "load_average_at_start": load,
        "before": args.before,
        "rows": {name: {label: {f: summary(v) for f, v in cell.items()}
                        for label, cell in cells.items()}
                 for name, cells in runs.items()},
    }  # fmt: skip
    path.write_text(json.dumps(doc, indent=1) + "\n")
    fields = list(next(iter(runs["before"].values())))
    print(f"{'cell':>14} {'':>7} " + " ".join(f"{f:>22}" for f in fields))
    for name, cells in doc["rows"].items():
        for label, cell in cells.items():
            print(f"{label:>14} {name:>7} " + " ".join(
                f"{c['median']:>8.3f} ({c['min']:.2f}-{c['max']:.2f})" for c in cell.values()))


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(argv: list[str], env: dict[str, str], servers: dict[str, int]) -> dict[str, float]:
    """Run ``argv`` to its end: its wall seconds, its CPU, and the CPU each server process
    (name: pid, e.g. ``{"radosgw": pid}``) spent meanwhile as ``<name>_cpu_s``. A failed
    child stops the benchmark with its output."""
    before = {name: cpu_of(pid) for name, pid in servers.items()}
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]}: exit {proc.returncode}: {proc.stderr[-800:]}")
    return {"seconds": round(seconds, 3),
            "client_cpu_s": round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 3),
            **{f"{name}_cpu_s": round(cpu_of(pid) - before[name], 3)
               for name, pid in servers.items()}}


def summarise(runs: list[dict[str, Any]], groups: list[tuple[str, ...]], by: tuple[str, ...],
              fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """For each group (values of the keys ``by``), the median of each field over the
    counted rounds (``warmup`` false) with its [min, max]."""
    rows = []
    for group in groups:
        mine = [r for r in runs if not r["warmup"] and tuple(r[k] for k in by) == group]
        row: dict[str, Any] = dict(zip(by, group))
        for field in fields:
            values = [r[field] for r in mine]
            row[field] = statistics.median(values)
            row[f"{field}_range"] = [min(values), max(values)]
        rows.append(row)
    return rows
