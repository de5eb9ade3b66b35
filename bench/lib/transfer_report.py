"""The transfer benchmark's results: medians per row, the markdown table, notes, a chart."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.lib import trust as _trust

MiB = 1024 * 1024
GiB = 1024 * MiB


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for label, count, size in data["workloads"]:
        for op in ("upload", "download"):
            for client in data["clients"]:
                runs = data["runs"].get(f"{label}|{op}|{client}", [])
                good = [
                    x
                    for x in runs
                    if not x.get("error")
                    and x.get("failed", 0) == 0
                    and x.get("mismatched", 0) == 0
                ]
                row: dict[str, Any] = {
                    "size": label,
                    "op": op,
                    "client": client,
                    "runs": len(runs),
                    "good": len(good),
                }
                errors = [
                    x.get("error") or f"failed={x.get('failed')} mismatched={x.get('mismatched')}"
                    for x in runs
                    if x not in good
                ]
                if errors:
                    row["errors"] = errors
                if good:
                    seconds = statistics.median(x["seconds"] for x in good)
                    cpu = statistics.median(x["cpu"] for x in good)
                    row.update(
                        seconds=seconds,
                        objects_per_s=count / seconds,
                        mib_per_s=count * size / seconds / MiB,
                        cpu=cpu,
                        cpu_per_gib=cpu / (count * size / GiB),
                        all_seconds=[round(x["seconds"], 3) for x in good],
                        all_cpu=[round(x["cpu"], 3) for x in good],
                    )
                    _trust.mark(row, {"seconds": [x["seconds"] for x in good],
                                      "cpu": [x["cpu"] for x in good]})
                    if any("server_cpu" in x for x in good):
                        row["server_cpu"] = statistics.median(
                            x.get("server_cpu", 0.0) for x in good
                        )
                rows.append(row)
    lookups = []
    for client in ("s3kv", "naive-head"):
        runs = [x for x in data["runs"].get(f"lookup|{client}", []) if not x.get("error")]
        if runs:
            lookups.append(
                {
                    "client": client,
                    "found": runs[0]["found"],
                    "rounds": max(x["rounds"] for x in runs),
                    "requests": max(x["requests"] for x in runs),
                    "seconds": statistics.median(x["seconds"] for x in runs),
                    "cpu": statistics.median(x["cpu"] for x in runs),
                }
            )
    return {"rows": rows, "lookups": lookups}


def render(summary: dict[str, Any], args: argparse.Namespace, label: str,
           trust: dict[str, Any] | None = None) -> str:
    """The markdown table, the criteria checks and the trust notes (``trust``: the JSON
    document, or anything with its ``loaded``/``trust`` keys)."""
    rows = summary["rows"]
    out = []
    has_server = any("server_cpu" in r for r in rows)
    head = [
        "size",
        "direction",
        "client",
        "objects/s",
        "MiB/s",
        "client CPU s",
        "CPU s/GiB",
        "s3kv throughput x",
    ]
    if has_server:
        head.append("server CPU s")
    out.append(
        f"Server: **{label}**; concurrency {args.concurrency} for every concurrent "
        f"client; median of {args.repeat} runs.\n"
    )
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|")
    checks = []
    for size in dict.fromkeys(r["size"] for r in rows):
        for op in ("upload", "download"):
            group = [r for r in rows if r["size"] == size and r["op"] == op]
            ours = next((r for r in group if r["client"] == "s3kv" and "mib_per_s" in r), None)
            for r in group:
                if "mib_per_s" not in r:
                    cells = [size, op, r["client"], "ERROR", "", "", "", ""]
                    if has_server:
                        cells.append("")
                    out.append("| " + " | ".join(cells) + " |")
                    continue
                ratio = f"{ours['mib_per_s'] / r['mib_per_s']:.2f}" if ours else "-"
                name = f"**{r['client']}**" if r["client"] == "s3kv" else r["client"]
                name += _trust.flag(r)
                cells = [
                    size,
                    op,
                    name,
                    f"{r['objects_per_s']:.0f}",
                    f"{r['mib_per_s']:.1f}",
                    f"{r['cpu']:.2f}",
                    f"{r['cpu_per_gib']:.2f}",
                    ratio,
                ]
                if has_server:
                    cells.append(f"{r.get('server_cpu', 0):.2f}")
                out.append("| " + " | ".join(cells) + " |")
            others = [r for r in group if r["client"] != "s3kv" and "mib_per_s" in r]
            measured = [r for r in group if "mib_per_s" in r]
            if ours and others:
                best = max(others, key=lambda r: r["mib_per_s"])
                low = min(measured, key=lambda r: r["cpu_per_gib"])
                ok_t = ours["mib_per_s"] >= best["mib_per_s"]
                ok_c = ours["cpu_per_gib"] <= 1.5 * low["cpu_per_gib"]
                same = next((r for r in others if r["client"] == "awscrt-checked"), None)
                checks.append(
                    f"- {size} {op}: s3kv throughput >= best other row "
                    f"({ours['mib_per_s']:.1f} vs {best['client']} {best['mib_per_s']:.1f} MiB/s): "
                    f"**{'PASS' if ok_t else 'FAIL'}**; s3kv CPU/GiB <= 1.5x lowest "
                    f"({ours['cpu_per_gib']:.2f} vs 1.5 x {low['client']} {low['cpu_per_gib']:.2f} "
                    f"= {1.5 * low['cpu_per_gib']:.2f}): **{'PASS' if ok_c else 'FAIL'}**"
                    + (
                        f"; against awscrt doing the same checks by hand: "
                        f"{ours['mib_per_s'] / same['mib_per_s']:.2f}x"
                        if same
                        else ""
                    )
                )
            elif not ours:
                checks.append(f"- {size} {op}: s3kv row missing or failed: **FAIL**")
    out.append("")
    out.extend(checks)
    if summary["lookups"]:
        out.append("")
        out.append(
            f"Lookup: a {args.chain:,}-block chain, first {args.chain_present:,} present "
            "(cold presence cache).\n"
        )
        out.append("| method | found | round trips | requests | wall ms | client CPU ms |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for x in summary["lookups"]:
            name = (
                "s3kv `lookup`"
                if x["client"] == "s3kv"
                else "naive HEAD loop (stops at first miss)"
            )
            out.append(
                f"| {name} | {x['found']} | {x['rounds']} | {x['requests']} | "
                f"{x['seconds'] * 1000:.0f} | {x['cpu'] * 1000:.0f} |"
            )
        ours = next((x for x in summary["lookups"] if x["client"] == "s3kv"), None)
        if ours:
            ok = (
                ours["rounds"] <= 24
                and ours["requests"] <= 100
                and ours["found"] == args.chain_present
            )
            out.append("")
            out.append(
                f"- lookup: found {ours['found']} (expected {args.chain_present}), "
                f"{ours['rounds']} round trips <= 24, {ours['requests']} requests <= 100 "
                f"(naive: {args.chain:,} for every key, or {args.chain_present + 1:,} "
                f"stopping at the first miss): **{'PASS' if ok else 'FAIL'}**"
            )
    errors = [r for r in rows if r.get("errors")]
    if errors:
        out.append("")
        for r in errors:
            out.append(f"- errors in {r['size']} {r['op']} {r['client']}: {r['errors'][0]}")
    notes = _trust.notes(trust or {}, rows, _label)
    return "\n".join(out + (["", *notes] if notes else []))


def _label(r: dict[str, Any]) -> str:
    return f"{r['size']} {r['op']} {r['client']}"


def markdown(result: dict[str, Any]) -> str:
    """A saved --json's table, as render() printed it (for the docs)."""
    return render(result["summary"], argparse.Namespace(**result["args"]), result["label"],
                  trust=result)


def notes(args: argparse.Namespace) -> str:

    versions = {}
    for mod in ("boto3", "botocore", "s3transfer", "obstore", "awscrt", "moto"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = "?"
    checksum = (
        "boto3 defaults (boto3 >= 1.36 adds a CRC32 checksum to every PUT and "
        "validates response checksums when present)"
        if args.boto3_checksum == "default"
        else "boto3 rows with request/response checksums `when_required`"
    )
    return (
        f"Notes: {checksum}; boto3-threads/s3transfer get "
        f"`max_pool_connections={args.concurrency}` "
        f"(boto3's default pool is 10). s3kv sends its own CRC32C (metadata + S3 checksum header) "
        f"and verifies it on download; obstore and awscrt send no checksum, and their PUTs "
        f"are not create-only. awscrt-checked is awscrt doing by hand what s3kv does per "
        f"block (CRC32C metadata + S3 checksum header, `If-None-Match: *`, the block tag; "
        f"the CRC32C verified on download). s3transfer sends "
        f"`Expect: 100-continue` (file-like bodies); the others do not. "
        + (
            "moto's server (werkzeug) answers every request with `Connection: close`, so every "
            "client opens one TCP connection per request, and it is single-process Python: "
            "the server, not the client, bounds throughput here. "
            if not args.endpoint_url
            else ""
        )
        + f"Client CPU = the "
        f"worker process's user+sys over the timed region. {os.cpu_count()} CPUs shared with "
        f"the server. "
        f"Python {platform.python_version()}, "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f". Command: `python bench/bench_transfer.py {' '.join(sys.argv[1:])}`"
    )


def chart(result: dict[str, Any], path: str) -> Path:
    """MiB/s and client CPU s/GiB per client and block size, upload and download.

    ``result`` is what --json writes (so a saved run can be drawn again).
    """
    from scripts.charts import figure, grouped_bars, legend, save

    args, label, rows = result["args"], result["label"], result["summary"]["rows"]
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    clients = list(dict.fromkeys(r["client"] for r in rows))
    command = result.get("command") or "python bench/bench_transfer.py " + " ".join(result["argv"])
    footer = (
        f"Measured: per client and block size, {_workloads(args)} uploaded into a fresh "
        f"bucket, then downloaded (a sample compared); concurrency {args['concurrency']}; "
        f"median of {args['repeat']} runs, rows interleaved. Client CPU = the worker "
        f"process's user+sys over the timed region. Server: {label}, on the same machine.\n"
        f"Machine: {result['machine']}. "
        f"Command: {command}" + _missing(rows)
    )
    footer = "\n".join([footer, *_trust.notes(result, rows, _label)])
    fig, axes = figure(
        title=f"s3kv and other S3 clients on {label}", footer=footer, nrows=2, ncols=2
    )
    metrics = (
        ("mib_per_s", "MiB/s (higher is better)", "{:.0f}"),
        ("cpu_per_gib", "client CPU s per GiB (lower is better)", "{:.1f}"),
    )
    for m, (key, ylabel, fmt) in enumerate(metrics):
        for o, op in enumerate(("upload", "download")):
            by = {(r["size"], r["client"]): r.get(key) for r in rows if r["op"] == op}
            grouped_bars(
                axes[2 * m + o],
                groups=[f"{size} blocks" for size in sizes],
                series={c: [by.get((size, c)) for size in sizes] for c in clients},
                ylabel=ylabel,
                title=f"{op}: {ylabel.split(' (')[0]}",
                fmt=fmt,
                legend=False,
            )
    legend(fig, axes[0])
    return save(fig, path)


def _missing(rows: list[dict[str, Any]]) -> str:
    """A footer line naming the clients without a bar (every run failed) and why."""
    failed: dict[str, list[str]] = {}
    why: dict[str, str] = {}
    for r in rows:
        if "mib_per_s" not in r:
            failed.setdefault(r["client"], []).append(f"{r['size']} {r['op']}")
            why.setdefault(r["client"], str((r.get("errors") or ["no good run"])[0]))
    if not failed:
        return ""
    return "\nNo bar = every run failed: " + "; ".join(
        f"{c} ({', '.join(where)}: {why[c][:70]})" for c, where in failed.items()
    )


def _workloads(args: dict[str, Any]) -> str:
    def size(n: int) -> str:
        return f"{n // MiB} MiB" if n % MiB == 0 else f"{n // 1024} KiB"

    return (
        f"{args['large_count']:,} x {size(args['large_size'])} and "
        f"{args['small_count']:,} x {size(args['small_size'])} blocks"
    )
