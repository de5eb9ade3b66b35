"""``s3kv repair``: replace damaged blocks from a good copy, or remove them."""

from __future__ import annotations

import argparse
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
from s3kv.errors import plural
from s3kv.units import format_bytes

if TYPE_CHECKING:
    from s3kv.ops.repair import RepairReport

EXAMPLES = """\
examples:
  # see first what would be done (reads every block, writes nothing)
  s3kv repair s3://my-bucket/kv --from /mnt/kv --dry-run

  # replace the bucket's damaged blocks from a node's disk cache
  s3kv repair s3://my-bucket/kv --from /mnt/kv

  # a node's disk cache from the bucket; blocks with no good copy anywhere are removed
  s3kv repair /mnt/kv --from s3://my-bucket/kv --remove-unrepairable

  # no good copy at all: remove what fails its check (vLLM recomputes those blocks)
  s3kv repair s3://my-bucket/kv --remove-unrepairable --namespace 330cb72a4d52

  # tag the blocks the lifecycle rule cannot see ('s3kv verify --tags' lists them)
  s3kv repair s3://my-bucket/kv --tags --dry-run
  s3kv repair s3://my-bucket/kv --tags

A block fails its check when it is empty, of another size than its namespace's blocks,
does not match the checksum recorded with it, or (recording none: a directory, vLLM's
object-store tier) differs from the source's copy whose checksum is recorded. Only such
blocks are touched, each re-checked right before: on S3 the replacing PUT carries
If-Match with the ETag judged (a block a writer replaced meanwhile is left alone,
counted 'changed'); in a directory the bytes are read again and the good copy goes in
through a temp file and a rename. Deletes are guarded the same way, but Ceph RGW 16
ignores If-Match on DELETE: there a writer that replaces the block in the instant
between the re-check and the delete loses it (a cache miss, never damage).
Exit codes: 0 nothing left damaged (a dry run: nothing found); 1 damage left, found in a
dry run, or failures; 7 nothing at LOCATION or --from, or a filter matched nothing.
"""
RESUME = "Run the same command again: it repairs only what still fails its check."


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "repair",
        help="replace damaged blocks from a good copy (--from), or remove them",
        description="Read every block at LOCATION, and replace each one that fails its "
        "check with --from's copy when that one passes its own; remove those with no good "
        "copy when --remove-unrepairable is given. Nothing else is written.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("location", metavar="LOCATION", help="s3://bucket[/prefix] or a directory")
    parser.add_argument(
        "--from",
        dest="source",
        metavar="SOURCE",
        help="a good copy of the cache (s3://bucket/prefix or a directory)",
    )
    parser.add_argument(
        "--remove-unrepairable",
        action="store_true",
        help="delete damaged blocks that have no good copy (default: leave and report them)",
    )
    parser.add_argument(
        "--tags",
        action="store_true",
        help="also give the s3kv-object=block tag to blocks that lack it (the lifecycle "
        "rule filters on it: without it a block never expires)",
    )
    parser.add_argument("--dry-run", action="store_true", help="judge every block, write nothing")
    parser.add_argument(
        "--namespace", action="append", default=[], metavar="FOLDER|DIGEST",
        help="only this namespace; repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--rank", action="append", default=[], type=int, help="only this rank; repeatable"
    )
    add_allow_empty(parser)
    group = parser.add_argument_group("source connection (default: the same as LOCATION's)")
    group.add_argument("--source-endpoint-url", help="the source's endpoint")
    group.add_argument("--source-region", help="the source's region")
    group.add_argument("--source-profile", help="the source's profile")
    add_connection(parser, writes=True)
    add_common(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from s3kv.naming.location import parse_location
    from s3kv.ops.repair import repair

    given = [args.location, *([args.source] if args.source else [])]
    location, *source = tenant_locations(args, *given)
    settings = settings_from_args(args)
    source_settings = settings_from_args(
        args,
        endpoint_url=args.source_endpoint_url,
        region=args.source_region,
        profile=args.source_profile,
    )
    with watching("repair", resume=RESUME) as progress:
        report = repair(
            parse_location(location),
            parse_location(source[0]) if source else None,
            settings=settings,
            source_settings=source_settings,
            remove_unrepairable=args.remove_unrepairable,
            dry_run=args.dry_run,
            namespaces=tuple(args.namespace),
            ranks=tuple(args.rank),
            allow_empty=args.allow_empty,
            on_progress=progress,
            tags=args.tags,
        )
    if args.json:
        jsondoc.emit(jsondoc.repair(report))
    else:
        for block in report.blocks[:50]:
            print(f"{block.action}: {block.key}: {block.problem}")
        for key, why in list(report.failures.items())[:20]:
            print(f"failed: {key}: {why}")
        print_nested(report.location, report.nested)
    summary(summary_line(report), json_mode=args.json)
    return 0 if report.ok else 1


def summary_line(r: RepairReport) -> str:
    replaced, removed = ("would replace", "would remove") if r.dry_run else ("replaced", "removed")
    tagged = ""
    if r.tagged is not None:
        tagged = f"; {r.tagged} {'would be tagged' if r.dry_run else 'tagged'}"
    return (
        f"repair: checked {plural(r.checked, 'block')} ({format_bytes(r.bytes_read)} read), "
        f"{r.damaged} damaged: {r.replaced} {replaced}, {r.removed} {removed}, "
        f"{r.unrepairable} unrepairable, {r.changed} changed meanwhile{tagged}; {r.failed} failed, "
        f"{r.unverified} unverified in {r.seconds:.2f}s at {r.location}"
        + (f" from {r.source}" if r.source else "")
    )
