"""What ``push``, ``pull`` and ``cp`` share: filter flags, running a sync, printing it."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from s3kv.cli.options import add_common, add_connection
from s3kv.cli.progress import Progress, summary
from s3kv.cli.units import format_bytes
from s3kv.location import Location
from s3kv.settings import S3Settings
from s3kv.sync import SyncOptions, SyncReport, sync

EXIT_OK, EXIT_FINDINGS = 0, 1


def add_sync_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="FOLDER|DIGEST",
        help="only this namespace (its folder name or 12-hex digest); repeatable",
    )
    parser.add_argument(
        "--rank", action="append", default=[], type=int, help="only blocks of this rank; repeatable"
    )
    parser.add_argument(
        "--allow-missing-manifest",
        action="store_true",
        help="copy blocks of namespaces that have no config.json (vLLM's object-store tier)",
    )
    parser.add_argument("--dry-run", action="store_true", help="show what would be copied")
    add_connection(parser)
    add_common(parser)


def run_sync(
    args: argparse.Namespace,
    source: Location,
    destination: Location,
    settings: S3Settings,
    *,
    source_settings: S3Settings | None = None,
    label: str,
) -> int:
    options = SyncOptions(
        namespaces=tuple(args.namespace),
        ranks=tuple(args.rank),
        allow_missing_manifest=args.allow_missing_manifest,
        dry_run=args.dry_run,
        concurrency=args.concurrency,
    )
    progress = Progress(label)
    try:
        report = sync(
            source,
            destination,
            settings=settings,
            source_settings=source_settings,
            options=options,
            on_progress=progress,
        )
    finally:
        progress.close()
    if args.json:
        print(json.dumps(report_dict(report), indent=2, sort_keys=True))
    else:
        print_report(report)
    summary(summary_line(label, report), json_mode=args.json)
    return EXIT_OK if report.ok else EXIT_FINDINGS


def report_dict(report: SyncReport) -> dict[str, Any]:
    data = asdict(report)
    data["ok"] = report.ok
    return data


def print_report(report: SyncReport) -> None:
    for ns in report.namespaces:
        line = (
            f"{ns.folder}: manifest {ns.manifest}; {ns.copied} copied, "
            f"{ns.already_present} already present, {ns.failed} failed"
        )
        if ns.unverified:
            line += f", {ns.unverified} unverified (no recorded checksum; size checked)"
        if ns.skipped:
            line += f", {ns.skipped} left out"
        print(line)
        if ns.problem:
            print(f"  {ns.problem}")
    for key, why in list(report.failures.items())[:20]:
        print(f"failed: {key}: {why}")
    if report.stray_keys:
        print(f"{report.stray_keys} key(s) outside the vLLM layout were refused (not copied):")
        for key in report.stray_examples[:20]:
            print(f"  stray: {key!r}")


def summary_line(label: str, r: SyncReport) -> str:
    verb = "would copy" if r.dry_run else "copied"
    rate = r.bytes / r.seconds if r.seconds > 0 else 0.0
    how = " (server-side)" if r.server_side else ""
    return (
        f"{label}: {verb} {r.copied} blocks{how}, {r.already_present} already present, "
        f"{r.failed} failed, {r.unverified} unverified, {r.skipped} left out, "
        f"{r.stray_keys} stray; "
        f"{format_bytes(r.bytes)} in {r.seconds:.2f}s ({format_bytes(rate)}/s) "
        f"{r.source} -> {r.destination}"
    )
