"""What ``push``, ``pull`` and ``cp`` share: filter flags, running a sync, printing it."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from s3kv.cli import jsondoc
from s3kv.cli.options import add_allow_empty, add_common, add_connection
from s3kv.cli.progress import summary, watching
from s3kv.errors import plural
from s3kv.units import format_bytes

if TYPE_CHECKING:
    from s3kv.naming.location import Location
    from s3kv.ops.scope import NestedCache
    from s3kv.ops.sync import SyncReport
    from s3kv.settings import S3Settings

EXIT_OK, EXIT_FINDINGS = 0, 1
SHOWN = 20
"""Lines of failed blocks a report prints on the terminal (``--json`` names more)."""
_SECONDS = re.compile(r"\b\d+(?:\.\d+)?s\b")
RESUME = (
    "Run the same command again to resume: what is already there is skipped, only what "
    "is missing is sent."
)


def add_sync_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="FOLDER|DIGEST",
        help="only this namespace (its folder name or 12-hex digest); repeatable; one that "
        "matches nothing is an error (exit 7)",
    )
    parser.add_argument(
        "--rank",
        action="append",
        default=[],
        type=int,
        help="only blocks of this rank; repeatable; one that matches nothing is an error",
    )
    parser.add_argument(
        "--allow-missing-manifest",
        action="store_true",
        help="copy blocks of namespaces that have no config.json (vLLM's object-store tier)",
    )
    parser.add_argument(
        "--checksum",
        action="store_true",
        help="compare blocks already at the destination by checksum too (reading them), "
        "not only by size, and replace those that fail their check from the source",
    )
    parser.add_argument("--dry-run", action="store_true", help="show what would be copied")
    add_allow_empty(parser)
    add_connection(parser, writes=True)
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
    from s3kv.ops.sync import SyncOptions, sync

    options = SyncOptions(
        namespaces=tuple(args.namespace),
        ranks=tuple(args.rank),
        allow_missing_manifest=args.allow_missing_manifest,
        dry_run=args.dry_run,
        concurrency=args.concurrency,
        checksum=args.checksum,
        allow_empty=args.allow_empty,
    )
    with watching(label, resume=RESUME) as progress:
        report = sync(
            source,
            destination,
            settings=settings,
            source_settings=source_settings,
            options=options,
            on_progress=progress,
        )
    if args.json:
        jsondoc.emit(jsondoc.sync(label, report))
    else:
        print_report(report)
    summary(summary_line(label, report), json_mode=args.json)
    return EXIT_OK if report.ok else EXIT_FINDINGS


def print_report(report: SyncReport) -> None:
    copied, replaced = ("would copy", "would replace") if report.dry_run else ("copied", "replaced")
    for ns in report.namespaces:
        line = (
            f"{ns.folder}: manifest {ns.manifest}; {ns.copied} {copied}, "
            f"{ns.already_present} already present, {ns.failed} failed"
        )
        if ns.replaced:
            line += f", {ns.replaced} {replaced}"
        if ns.unverified:
            line += f", {ns.unverified} unverified (no recorded checksum; size checked)"
        if ns.skipped:
            line += f", {ns.skipped} left out"
        print(line)
        if ns.problem:
            print(f"  {ns.problem}")
    for line in failure_lines(report):
        print(line)
    if report.stray_keys:
        print(f"{report.stray_keys} key(s) outside the vLLM layout were refused (not copied):")
        for key in report.stray_examples[:20]:
            print(f"  stray: {key!r}")
    print_nested(report.source, report.nested)


def failure_lines(report: SyncReport) -> list[str]:
    """The failed blocks, a line each; blocks that failed for one same cause (their own
    names taken out of its text: a full disk, a refused write) share one line with how
    many they are. At most :data:`SHOWN` lines, then how many more failed."""
    from s3kv.ops.sync_report import MAX_FAILURES_KEPT

    causes: dict[str, list[tuple[str, str]]] = {}
    for key, why in report.failures.items():
        name = key.rpartition("/")[2]
        cause = re.sub(r"\S*" + re.escape(name), "<block>", why) if name else why
        # what retrying took differs from block to block: "after 8 attempts in 1.9s"
        causes.setdefault(_SECONDS.sub("#s", cause), []).append((key, cause))
    lines, named = [], 0
    for failed in list(causes.values())[:SHOWN]:
        if len(failed) == 1:
            lines.append(f"failed: {failed[0][0]}: {report.failures[failed[0][0]]}")
        else:
            lines.append(f"failed: {len(failed):,} blocks, one cause: {failed[0][1]} "
                         f"(the first: {failed[0][0]})")
        named += len(failed)
    if report.failed > named:
        lines.append(f"... and {report.failed - named:,} more failed (--json names up to "
                     f"{MAX_FAILURES_KEPT:,} with why)")
    return lines


def print_nested(location: str, caches: tuple[NestedCache, ...]) -> None:
    for cache in caches:
        print(
            f"note: {plural(cache.namespaces, 'namespace')} under {cache.location}: not part "
            f"of {location} (a location holds the namespaces directly under it); name that "
            "location to include them"
        )


def summary_line(label: str, r: SyncReport) -> str:
    copied = "would copy" if r.dry_run else "copied"
    replaced = "would replace" if r.dry_run else "replaced"
    how = " (server-side)" if r.server_side else ""
    if r.dry_run:
        moved = f"{format_bytes(r.bytes)} (dry run: nothing written) in {r.seconds:.2f}s"
    else:
        rate = r.bytes / r.seconds if r.seconds > 0 else 0.0
        moved = f"{format_bytes(r.bytes)} in {r.seconds:.2f}s ({format_bytes(rate)}/s)"
    return (
        f"{label}: {copied} {plural(r.copied, 'block')}{how}, {r.replaced} {replaced}, "
        f"{r.already_present} already present, {r.failed} failed, {r.unverified} unverified, "
        f"{r.skipped} left out, {plural(r.stray_keys, 'stray key')}; "
        f"{moved} {r.source} -> {r.destination}"
    )
