"""Numbers people can trust: a quiet machine at the start, rounds that agree.

Every benchmark script that records results goes through this module:

* ``add_arguments(parser)`` adds ``--force-loaded`` and ``--wait-quiet``.
* ``gate(args)``, first thing in a measuring run: the 1-minute load average must be at
  most ``LOAD_LIMIT``. Over it the script stops with a one-line message (exit 2): what
  other processes do to the CPUs then shows in every figure. ``--force-loaded`` records
  anyway, and the record says so (``"loaded": true``, a chart footer line, a table note).
  It returns the record ``stamp()`` puts in the JSON.
* ``mark(row, samples)`` compares a row's interleaved rounds, metric by metric:
  ``max/min - 1`` over the rounds is its spread; a row whose spread exceeds
  ``SPREAD_LIMIT`` in any metric lists those metrics in ``"disagree"``.
* ``notes(doc, label)`` the lines a chart footer or a table adds for both.
* ``commit()`` the checkout measured; ``machine()`` where it was measured, for the JSON
  and the chart footer: cores, Python, OS, date.

A parent benchmark that checked the load before starting servers (bench_rgw.py) passes
the value it saw to its children with ``--start-load-average``, so the servers it just
started do not count against the measurement.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

LOAD_LIMIT = 1.0
"""The highest 1-minute load average at which a run may start unmarked."""
SPREAD_LIMIT = 0.2
"""Rounds whose max/min - 1 is above this disagree (20%)."""
MARK = "†"
"""How a table marks a row whose rounds disagree."""


def load_average() -> float:
    """The 1-minute load average (runnable and uninterruptible tasks, all CPUs)."""
    return os.getloadavg()[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--force-loaded", action="store_true",
        help=f"record even when the 1-minute load average is over {LOAD_LIMIT:g} at the "
             "start; the results are marked as measured on a loaded machine "
             '(JSON "loaded": true, a line in the chart footer and under the table)')
    parser.add_argument(
        "--wait-quiet", type=float, default=0, metavar="SECONDS",
        help="wait up to this long for the load average to drop under the limit before "
             "deciding (the previous benchmark's servers take a minute or two to fade "
             "from it)")
    # Set by a parent benchmark that checked the load before starting its servers.
    parser.add_argument("--start-load-average", type=float, help=argparse.SUPPRESS)


def gate(args: argparse.Namespace) -> dict[str, Any]:
    """Stop here (exit 2) on a loaded machine unless ``--force-loaded``; the JSON record."""
    given = getattr(args, "start_load_average", None)
    start = load_average() if given is None else given
    deadline = time.monotonic() + (getattr(args, "wait_quiet", 0) or 0)
    if given is None and start > LOAD_LIMIT and time.monotonic() < deadline:
        print(f"waiting for the load average ({start:.2f}) to drop under {LOAD_LIMIT:g}",
              file=sys.stderr, flush=True)
        while start > LOAD_LIMIT and time.monotonic() < deadline:
            time.sleep(5)
            start = load_average()
    loaded = start > LOAD_LIMIT
    if loaded and not getattr(args, "force_loaded", False):
        prog = os.path.basename(sys.argv[0]) or "benchmark"
        print(f"{prog}: the 1-minute load average is {start:.2f}, over {LOAD_LIMIT:g}: other "
              "work on this machine would show in every figure, so nothing is measured. "
              "Wait until `uptime` shows it under 1, or pass --force-loaded to record "
              "anyway, marked as loaded.", file=sys.stderr)
        raise SystemExit(2)
    if loaded:
        print(f"warning: load average {start:.2f} at the start; results are marked loaded",
              file=sys.stderr)
    return {"load_average_1m": round(start, 2), "loaded": loaded, "load_limit": LOAD_LIMIT,
            "spread_limit": SPREAD_LIMIT}


def commit() -> str:
    """The checkout measured: its commit, ``+dirty`` with uncommitted changes."""
    root = str(Path(__file__).resolve().parents[2])

    def git(*argv: str) -> str:
        return subprocess.run(["git", "-C", root, *argv], capture_output=True,
                              text=True, timeout=60).stdout.strip()
    try:
        return git("rev-parse", "--short", "HEAD") + ("+dirty" if git("status", "--short")
                                                      else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def stamp(doc: dict[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """Put the gate's record in a results document: ``doc["loaded"]``, ``doc["trust"]``."""
    doc["loaded"] = bool(record["loaded"])
    doc["trust"] = dict(record)
    return doc


def versions(*names: str) -> dict[str, str]:
    """The version of each distribution that ran; ``s3kv`` is the imported package's own
    (in the vLLM venvs it comes from the checkout on PYTHONPATH, with no dist-info)."""
    from importlib import metadata

    found: dict[str, str] = {}
    for name in names:
        if name == "s3kv":
            import s3kv

            found[name] = s3kv.__version__
            continue
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def spread(values: Iterable[float]) -> float:
    """max/min - 1 over the rounds (0 for fewer than two, or a non-positive minimum)."""
    vs = [float(v) for v in values]
    if len(vs) < 2 or min(vs) <= 0:
        return 0.0
    return max(vs) / min(vs) - 1


def mark(row: dict[str, Any], samples: Mapping[str, Iterable[float]]) -> dict[str, Any]:
    """Record each metric's spread over the rounds in ``row``; list those over the limit."""
    spreads = {name: spread(values) for name, values in samples.items()}
    row["spread"] = {name: round(s, 3) for name, s in spreads.items()}
    row["disagree"] = sorted(name for name, s in spreads.items() if s > SPREAD_LIMIT)
    return row


def flag(row: Mapping[str, Any]) -> str:
    """``MARK`` for a row whose rounds disagree, else empty."""
    return MARK if row.get("disagree") else ""


def notes(doc: Mapping[str, Any], rows: Iterable[Mapping[str, Any]] = (),
          label: Callable[[Mapping[str, Any]], str] = str,
          metrics: Iterable[str] | None = None) -> list[str]:
    """Lines for a chart footer or under a table: a loaded start, rows that disagree
    (in any metric, or only in ``metrics``: those a chart shows)."""
    out = []
    trust = doc.get("trust")
    if trust is None:
        out.append("No load-average record: measured before the trust checks existed.")
    elif doc.get("loaded"):
        out.append(f"LOADED MACHINE: 1-minute load average {trust['load_average_1m']:g} at "
                   f"the start (limit {trust['load_limit']:g}), recorded with --force-loaded; "
                   "not for publication.")
    shown = None if metrics is None else set(metrics)
    bad = [(r, [m for m in r.get("disagree", ()) if shown is None or m in shown])
           for r in rows]
    bad = [(r, ms) for r, ms in bad if ms]
    if bad:
        limit = trust["spread_limit"] if trust else SPREAD_LIMIT
        out.append(f"{MARK} rounds disagree by more than {limit:.0%} (max/min - 1): "
                   + "; ".join(f"{label(r)} ({', '.join(ms)})" for r, ms in bad))
    return out


def machine(*, shared: bool = True) -> str:
    """``2-core machine, shared with other jobs, Python 3.11.7, Linux x86_64, 2026-11-30``."""
    where = f"{os.cpu_count()}-core machine" + (", shared with other jobs" if shared else "")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    system = f"{platform.system()} {platform.machine()}"
    return f"{where}, Python {platform.python_version()}, {system}, {when}"
