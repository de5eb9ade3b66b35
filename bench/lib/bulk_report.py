"""bench/bench_bulk.py's numbers: rows from the raw runs, and the tables the docs show.

``summarize(runs)`` turns the counted runs (warm-up left out, failures left out) into one
row per link, cache, direction and tool: median seconds with min-max, client CPU
seconds per GiB, the tool's seconds divided by s3kv's, and the trust marks of
bench/lib/trust.py. ``markdown(doc)`` is the full table (docs/benchmarks.md),
``summary(doc)`` the seconds alone (README.md); both take the saved JSON.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from bench.lib import trust as _trust
from bench.lib.bulk_tools import TOOLS, WHY

GiB = 1 << 30
LINKS = ("rgw-http", "rgw-https")


def size(n: int) -> str:
    """``256 KiB``, ``2 MiB``, ``1.5 GiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.3g} {unit}" if value != int(value) else f"{int(value)} {unit}"
    return f"{n} B"


def cache_label(row: Mapping[str, Any]) -> str:
    return f"{size(row['bytes'])} of {size(row['block_bytes'])} blocks"


def _key(run: Mapping[str, Any]) -> tuple[str, int, str, str]:
    return (run["link"], run["block_bytes"], run["direction"], run["tool"])


def summarize(runs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (link, block size, direction, tool) over its counted, successful runs."""
    groups: dict[tuple[str, int, str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        if run.get("warmup") or run.get("error"):
            continue
        groups.setdefault(_key(run), []).append(run)
    rows = []
    for (link, block, direction, tool), group in groups.items():
        first = group[0]
        gib = first["bytes"] / GiB
        seconds = [g["seconds"] for g in group]
        per_gib = [g["cpu_s"] / gib for g in group]
        row: dict[str, Any] = {
            "link": link, "block_bytes": block, "blocks": first["blocks"],
            "bytes": first["bytes"], "direction": direction, "tool": tool,
            "rounds": len(group),
            "seconds": statistics.median(seconds), "seconds_min": min(seconds),
            "seconds_max": max(seconds), "seconds_runs": seconds,
            "mib_s": first["bytes"] / (1 << 20) / statistics.median(seconds),
            "cpu_s": statistics.median(g["cpu_s"] for g in group),
            "cpu_s_per_gib": statistics.median(per_gib), "cpu_s_per_gib_min": min(per_gib),
            "cpu_s_per_gib_max": max(per_gib), "cpu_s_per_gib_runs": per_gib,
        }
        rows.append(_trust.mark(row, {"seconds": seconds, "cpu_s_per_gib": per_gib}))
    by = {_key(r): r for r in rows}
    for r in rows:
        base = by.get((r["link"], r["block_bytes"], r["direction"], "s3kv"))
        r["vs_s3kv"] = r["seconds"] / base["seconds"] if base else None
    order = {t: i for i, t in enumerate(TOOLS)}
    rows.sort(key=lambda r: (_link_order(r["link"]), r["block_bytes"],
                             r["direction"] != "push", order.get(r["tool"], 99)))
    return rows


def _link_order(link: str) -> int:
    return LINKS.index(link) if link in LINKS else len(LINKS)


def _mark(row: Mapping[str, Any], metric: str) -> str:
    return _trust.MARK if metric in row.get("disagree", ()) else ""


def _seconds(row: Mapping[str, Any]) -> str:
    return (f"{row['seconds']:.2f} s ({row['seconds_min']:.2f}-{row['seconds_max']:.2f})"
            f"{_mark(row, 'seconds')}")


def _ratio(row: Mapping[str, Any]) -> str:
    return "" if row["tool"] == "s3kv" or row.get("vs_s3kv") is None else \
        f", {row['vs_s3kv']:.2f}x"


def _cells(doc: Mapping[str, Any]) -> tuple[list[str], list[tuple[str, int, str]],
                                              dict[tuple[str, int, str, str], Any]]:
    rows = doc["rows"]
    tools = [t for t in TOOLS if t in doc["meta"].get("tools", {})
             or any(r["tool"] == t for r in rows)]
    cells = sorted({(r["link"], r["block_bytes"], r["direction"]) for r in rows}
                   | set(_failed_cells(doc)),
                   key=lambda c: (_link_order(c[0]), c[1], c[2] != "push"))
    return tools, cells, {_key(r): r for r in rows}


def _failed_cells(doc: Mapping[str, Any]) -> list[tuple[str, int, str]]:
    return [(e["link"], e["block_bytes"], e["direction"])
            for e in doc["meta"].get("errors", [])]


def _label(doc: Mapping[str, Any], link: str, block: int) -> str:
    caches = {c["block_bytes"]: c for c in doc["meta"].get("caches", [])}
    cache = caches.get(block)
    if cache is None:
        return size(block) + " blocks"
    return cache_label({"bytes": cache["bytes"], "block_bytes": block})


def _table(doc: Mapping[str, Any], cell: Any, head: str) -> list[str]:
    tools, cells, by = _cells(doc)
    out = ["| link | cache | direction | " + " | ".join(f"{t}{head}" for t in tools) + " |",
           "|---|---|---|" + "--:|" * len(tools)]
    failed = {(e["link"], e["block_bytes"], e["direction"], e["tool"])
              for e in doc["meta"].get("errors", [])}
    for link, block, direction in cells:
        line = []
        for tool in tools:
            row = by.get((link, block, direction, tool))
            line.append(cell(row) if row else
                        "failed" if (link, block, direction, tool) in failed else "-")
        out.append(f"| {link} | {_label(doc, link, block)} | {direction} | "
                   + " | ".join(line) + " |")
    return out


def _preamble(doc: Mapping[str, Any]) -> str:
    meta = doc["meta"]
    rounds, warmup = meta.get("rounds", 0), meta.get("warmup", 0)
    after = {0: "no warm-up round", 1: "after a warm-up round"}.get(
        warmup, f"after {warmup} warm-up rounds")
    return (f"Caches written by {meta.get('writer_label', 'an unknown writer')}; Ceph RGW "
            f"16 on loopback; each tool with its defaults, a whole process per copy; "
            f"median (min-max) of {rounds} interleaved round{'' if rounds == 1 else 's'}, "
            f"{after}; every pulled tree compared byte for byte with its source."
            + (" A --quick smoke run: not for publication." if meta.get("quick") else ""))


def _footer(doc: Mapping[str, Any]) -> list[str]:
    meta = doc["meta"]
    out = ["", "x: the tool's seconds divided by s3kv's (above 1: s3kv is done sooner)."]
    for tool, info in meta.get("tools", {}).items():
        for scheme, dev in info.get("deviations", {}).items():
            words = " ".join(f"{k}={v}" for k, v in dev["env"].items())
            over = "TLS" if scheme == "https" else scheme.upper()
            out.append(f"{tool} over {over} runs with {words}: {dev['why']}.")
    failed = sorted({f"{e['tool']} {e['direction']} of {size(e['block_bytes'])} blocks on "
                     f"{e['link']}" for e in meta.get("errors", [])})
    if failed:
        out.append("Failed in some round (see the JSON's meta.errors): " + "; ".join(failed)
                   + ".")
    if any(r.get("disagree") for r in doc["rows"]):
        limit = doc.get("trust", {}).get("spread_limit", _trust.SPREAD_LIMIT)
        out.append(f"{_trust.MARK} after a figure: its rounds disagree by more than "
                   f"{limit:.0%} (max/min - 1).")
    return out + _trust.notes(doc)


def markdown(doc: Mapping[str, Any]) -> str:
    """Per cell: median seconds (min-max), the ratio to s3kv, client CPU seconds per GiB."""
    def cell(row: Mapping[str, Any]) -> str:
        return (f"{_seconds(row)}{_ratio(row)}<br>{row['cpu_s_per_gib']:.2f} s/GiB CPU"
                f"{_mark(row, 'cpu_s_per_gib')}")

    return "\n".join([_preamble(doc), "", *_table(doc, cell, ""), *_footer(doc)])


def summary(doc: Mapping[str, Any]) -> str:
    """Median seconds per cell and the ratio to s3kv, for the README."""
    def cell(row: Mapping[str, Any]) -> str:
        return f"{row['seconds']:.2f}{_mark(row, 'seconds')}{_ratio(row)}"

    return "\n".join([*_table(doc, cell, " s"), *_footer(doc)])


def deviations() -> dict[str, dict[str, dict[str, Any]]]:
    """tool -> scheme -> the variables set against its defaults and why (for the JSON)."""
    from bench.lib.bulk_tools import DEVIATIONS

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (tool, scheme), env in DEVIATIONS.items():
        out.setdefault(tool, {})[scheme] = {"env": dict(env), "why": WHY[(tool, scheme)]}
    return out
