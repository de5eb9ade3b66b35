"""``s3kv gc``: delete blocks by time since last use, or least recently used first."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from s3kv.cli import jsondoc
from s3kv.cli.options import (
    add_allow_empty,
    add_common,
    add_connection,
    settings_from_args,
    tenant_locations,
)
from s3kv.cli.progress import summary, watching
from s3kv.cli.syncing import print_nested
from s3kv.errors import InvalidInputError, plural
from s3kv.units import flag_type, format_bytes, parse_duration, parse_size

if TYPE_CHECKING:
    from s3kv.ops.gc.collect import GCReport

EXAMPLES = """\
examples:
  # delete blocks not used for a week; see first what would go
  s3kv gc s3://my-bucket/kv --older-than 7d --dry-run
  s3kv gc s3://my-bucket/kv --older-than 7d

  # keep the bill under 500 GiB: least recently used blocks first
  s3kv gc s3://my-bucket/kv --max-bytes 500GiB

  # also drop manifests of namespaces left with no block at all
  s3kv gc /mnt/kv --older-than 30d --delete-empty-manifests

  # a gc was killed: see who held its lease and for how long, then remove it
  s3kv gc s3://my-bucket/kv --break-lease

Age is time since Last-Modified, which s3kv's vLLM tier renews when it uses a block (see
renew_after in docs/vllm-tier.md): time since last use. Near the cutoff (within
--chain-window) blocks are decided as chains and looked at again before their deletes:
what stays of a chain is a prefix, and a block used meanwhile stays. One gc runs at a
time per location (a second one stops, exit 1; its lease is aged by the store's clock).
In a versioned bucket deletes free nothing: the noncurrent versions left are reported
(--delete-noncurrent-versions removes them). Manifests are never deleted while any block of
their namespace remains, and by default not at all (a writer still running would orphan
its new blocks). Incomplete multipart uploads older than --abort-uploads-older-than
(default 1d) are aborted.
Durations: 30s, 30m, 12h, 7d, 2w. Sizes: 500GiB, 10G, 1.5TB, 4096.
Caches nested below LOCATION are never touched; a LOCATION with no namespace directly
under it fails with exit 7 before anything is deleted (--allow-empty accepts an empty one).
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "gc",
        help="delete blocks unused for a while (--older-than) or LRU first (--max-bytes)",
        description="Delete blocks not used for a duration, or least recently used first "
        "until the blocks fit a byte budget, in batches of up to 1,000 keys per request.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("location", metavar="LOCATION", help="s3://bucket/prefix or a directory")
    parser.add_argument(
        "--older-than",
        type=flag_type(parse_duration),
        metavar="DURATION",
        help="delete blocks last used (or written) longer ago, e.g. 7d",
    )
    parser.add_argument(
        "--max-bytes",
        type=flag_type(parse_size),
        metavar="SIZE",
        help="delete least recently used blocks until the rest fit, e.g. 500GiB",
    )
    parser.add_argument(
        "--abort-uploads-older-than",
        type=flag_type(parse_duration),
        metavar="DURATION",
        default=None,  # s3kv.ops.gc.collect.DEFAULT_UPLOADS_OLDER_THAN (imported only to run)
        help="abort incomplete multipart uploads older than this; default 1d",
    )
    parser.add_argument(
        "--delete-empty-manifests",
        action="store_true",
        help="delete manifests of namespaces with no block left",
    )
    parser.add_argument(
        "--chain-window",
        type=flag_type(parse_duration),
        metavar="DURATION",
        default=None,  # s3kv.ops.gc.collect.DEFAULT_CHAIN_WINDOW (imported only to run)
        help="blocks used within this long of the cutoff are read (a HEAD each) and "
        "decided as chains, so a chain only ever loses its tail; set it to the tier's "
        "renew_after; default 1d",
    )
    parser.add_argument(
        "--delete-noncurrent-versions",
        action="store_true",
        help="in a versioned bucket, also remove the noncurrent versions of blocks (what "
        "deletes and renewals leave stored)",
    )
    parser.add_argument(
        "--break-lease",
        action="store_true",
        help="remove the lease of a gc that died (shows its holder and age, asks first), "
        "then exit",
    )
    parser.add_argument("--yes", action="store_true", help="with --break-lease: do not ask")
    parser.add_argument("--dry-run", action="store_true", help="show what would be deleted")
    add_allow_empty(parser)
    # For tests and reproducible runs: evaluate ages as of this ISO-8601 time.
    parser.add_argument("--now", type=flag_type(_parse_now), help=argparse.SUPPRESS)
    add_connection(parser, concurrency=False)  # one delete request at a time
    add_common(parser)
    parser.set_defaults(handler=run)


def _parse_now(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(f"--now {text!r} is not an ISO-8601 time") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


RESUME = "Deleted blocks stay deleted; run the same command again to finish."


def run(args: argparse.Namespace) -> int:
    if args.break_lease:
        from s3kv.cli.gc_lease import break_lease_command

        return break_lease_command(args)
    from s3kv.ops.gc.collect import DEFAULT_CHAIN_WINDOW, DEFAULT_UPLOADS_OLDER_THAN, gc

    uploads = args.abort_uploads_older_than
    window = args.chain_window
    with watching("gc", resume=RESUME) as progress:
        report = gc(
            tenant_locations(args, args.location)[0],
            older_than=args.older_than,
            max_bytes=args.max_bytes,
            uploads_older_than=DEFAULT_UPLOADS_OLDER_THAN if uploads is None else uploads,
            delete_empty_manifests=args.delete_empty_manifests,
            delete_noncurrent_versions=args.delete_noncurrent_versions,
            chain_window=DEFAULT_CHAIN_WINDOW if window is None else window,
            dry_run=args.dry_run,
            now=args.now,
            settings=settings_from_args(args),
            allow_empty=args.allow_empty,
            on_progress=progress,
        )
    if args.json:
        jsondoc.emit(jsondoc.gc(report))
    else:
        for key, why in list(report.failures.items())[:20]:
            print(f"failed to delete {key}: {why}")
        print_nested(report.location, report.nested)
    summary(summary_line(report), json_mode=args.json)
    return 0 if report.ok else 1


def summary_line(r: GCReport) -> str:
    what = (
        f"{plural(r.blocks_deleted, 'block')}, {plural(r.manifests_deleted, 'manifest')}, "
        f"{plural(r.temp_files_deleted, 'stale temp file')}"
    )
    if r.dry_run:
        done = (
            f"would free {format_bytes(r.bytes_freed)} (would delete {what}; would abort "
            f"{plural(r.uploads_aborted, 'upload')})"
        )
    else:
        done = (
            f"freed {format_bytes(r.bytes_freed)} ({what}; "
            f"{plural(r.uploads_aborted, 'upload')} aborted)"
        )
    stray = f"; {plural(r.stray_keys, 'stray key')} left alone" if r.stray_keys else ""
    return (
        f"gc: {done}; kept {plural(r.blocks_kept, 'block')} ({format_bytes(r.bytes_kept)}){stray}"
        f"{near_note(r)}; {len(r.failures)} failed; "
        f"{plural(r.delete_requests, 'delete request')} in {r.seconds:.2f}s at {r.location}"
        f"{versions_note(r)}"
    )


def near_note(r: GCReport) -> str:
    """The blocks near the cutoff: what reading them cost, and what was used meanwhile."""
    if not r.head_requests:
        return ""
    used = f", {r.used_since_listed} used since listed: kept" if r.used_since_listed else ""
    return f" ({plural(r.head_requests, 'HEAD')} near the cutoff{used})"


def versions_note(r: GCReport) -> str:
    """What a versioned bucket still stores (a delete there only hides a block)."""
    if r.versioning == "unknown":
        return (
            "\nnote: could not tell whether the bucket is versioned (no "
            "s3:GetBucketVersioning); in a versioned bucket deleted blocks stay stored"
        )
    if r.versioning is None:
        return ""
    removed = (
        f"{'would remove' if r.dry_run else 'removed'} "
        f"{plural(r.noncurrent_versions_deleted, 'noncurrent version')}; "
        if r.noncurrent_versions_deleted
        else ""
    )
    left = (
        f"{plural(r.noncurrent_versions, 'noncurrent version')} "
        f"({format_bytes(r.noncurrent_bytes)}) still stored: the bucket's noncurrent-version "
        "rule removes them, or --delete-noncurrent-versions now"
        if r.noncurrent_versions
        else "no noncurrent version left"
    )
    return f"\nversioned bucket ({r.versioning}): {removed}{left}"
