"""``s3kv verify``: manifests, layout, block sizes, checksums (``--deep``), orphans."""

from __future__ import annotations

import argparse
import sys
from typing import Any

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

EXAMPLES = """\
examples:
  # quick: listing and manifests only
  s3kv verify s3://my-bucket/kv

  # read every block and check the checksum recorded when it was stored
  s3kv verify s3://my-bucket/kv --deep --concurrency 64

  # blocks the lifecycle rule cannot see (no s3kv-object=block tag): they never expire
  s3kv verify s3://my-bucket/kv --tags

  # in a script: exit code 1 when anything is found, 7 when the location holds nothing
  s3kv verify /mnt/kv --json > findings.json || echo "problems found"

  # then fix what was found from a good copy (see 's3kv repair --help')
  s3kv repair s3://my-bucket/kv --from /mnt/kv --dry-run
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "verify",
        help="check manifests, keys, block sizes and (--deep) checksums",
        description="Check a location: manifests hash to their folder digests; every key "
        "follows the layout; blocks of a namespace and rank share one size (an odd-sized "
        "one is short or corrupt); --deep reads every block and checks its checksum; "
        "blocks without a manifest (orphans) and stray keys are listed. Exit code 1 on "
        "any finding; 7 when the location holds no namespace (a wrong prefix never "
        "passes), unless --allow-empty and nothing at all is there.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("location", metavar="LOCATION", help="s3://bucket[/prefix] or a directory")
    parser.add_argument("--deep", action="store_true", help="read and checksum every block")
    parser.add_argument(
        "--tags",
        action="store_true",
        help="read every block's tags (a request each): an untagged or wrong-tagged block "
        "is invisible to the lifecycle rule and never expires ('s3kv repair --tags' fixes it)",
    )
    add_allow_empty(parser)
    add_connection(parser)
    add_common(parser)
    parser.set_defaults(handler=run)


def directory_note(where: str) -> str:
    """What ``--deep`` can and cannot tell in a directory, and how to compare contents."""
    return (
        f"{where} is a directory, and a directory records no checksums: --deep read every "
        "block and checked that it is readable, not empty and of its namespace's block "
        "size, but a changed byte in a block of the right size passes. To compare contents, "
        "check it against a copy that records checksums (a bucket s3kv wrote): "
        f"'s3kv repair {where} --from s3://BUCKET/PREFIX --dry-run' names every block that "
        "differs (as 's3kv pull s3://BUCKET/PREFIX DIR --checksum --dry-run' counts them)"
    )


def run(args: argparse.Namespace) -> int:
    from s3kv.ops.verify import verify

    with watching("verify", resume="verify changes nothing; run it again.") as progress:
        report = verify(
            tenant_locations(args, args.location)[0],
            settings=settings_from_args(args),
            deep=args.deep,
            concurrency=args.concurrency,
            allow_empty=args.allow_empty,
            on_progress=progress,
            tags=args.tags,
        )
    note = directory_note(report.location) if report.deep and "://" not in report.location else None
    if args.json:
        jsondoc.emit({**jsondoc.verify(report), "note": note})
    else:
        for finding in report.findings:
            print(f"{finding.kind}: {finding.key!r}: {finding.message}")
        print_nested(report.location, report.nested)
    if note:
        print(f"note: {note}", file=sys.stderr if args.json else sys.stdout)
    found = sum(report.counts.values())
    detail = ", ".join(f"{n} {kind}" for kind, n in sorted(report.counts.items()))
    deep = (
        f", {report.blocks_read:,} read ({format_bytes(report.bytes_read)}), "
        f"{report.unverified} unverified"
        if report.deep
        else ""
    ) + (
        f", tags of {plural(report.tags_checked, 'block')} read"
        if report.tags_checked is not None
        else ""
    )
    summary(
        f"verify: {plural(report.namespaces, 'namespace')}, {plural(report.blocks, 'block')}"
        f"{deep}; {plural(found, 'finding')}{': ' + detail if detail else ''} in "
        f"{report.seconds:.2f}s at {report.location}",
        json_mode=args.json,
    )
    return 0 if report.ok else 1
