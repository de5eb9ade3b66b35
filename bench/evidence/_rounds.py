"""What the evidence scripts share: a child process timed whole, radosgw's CPU beside it,
and medians with their ranges over the counted rounds."""

from __future__ import annotations

import argparse
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
