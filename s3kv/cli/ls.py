"""``s3kv ls``: one row per namespace at a location."""

from __future__ import annotations

import argparse
from typing import Any

from s3kv.cli import jsondoc
from s3kv.cli.options import add_allow_empty, add_common, add_connection, settings_from_args
from s3kv.cli.progress import summary, watching
from s3kv.cli.syncing import print_nested
from s3kv.cli.units import format_bytes
from s3kv.errors import plural

EXAMPLES = """\
examples:
  s3kv ls s3://my-bucket/kv
  s3kv ls s3://my-bucket/kv --json | jq '.namespaces[] | {folder, blocks, bytes}'
  s3kv ls /mnt/kv

A location holds the namespaces directly under it. One that holds none fails with
exit 7 and names the location meant (caches one level down, a namespace folder's parent,
a close name); --allow-empty accepts an empty one.
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "ls",
        help="list the namespaces (models, ranks, blocks, bytes) at a location",
        description="One row per namespace: folder (cut in the middle to fit 100 columns), "
        "dtype, parallel sizes (tp/pp/pcp/dcp), ranks present, blocks, size, and how long ago "
        "the oldest..newest block was last written or used; a second table splits the bytes "
        "by time since last use (<1h, 1h-1d, 1d-7d, >7d). Namespaces without a manifest (vLLM's "
        "object-store tier) are noted below the table. --json has every field in full "
        "(model, bytes, RFC 3339 timestamps, manifest status).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("location", metavar="LOCATION", help="s3://bucket[/prefix] or a directory")
    add_allow_empty(parser)
    add_connection(parser, concurrency=False)
    add_common(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from s3kv.cli.ls_table import render
    from s3kv.inventory import inventory

    with watching("ls", resume="ls changes nothing; run it again.") as progress:
        inv = inventory(
            args.location,
            settings=settings_from_args(args),
            allow_empty=args.allow_empty,
            on_progress=progress,
        )
    if args.json:
        jsondoc.emit(jsondoc.ls(inv))
    else:
        for line in render(inv):
            print(line)
        print_nested(inv.location, inv.nested)
    summary(
        f"ls: {plural(len(inv.namespaces), 'namespace')}, {plural(inv.blocks, 'block')}, "
        f"{format_bytes(inv.bytes)}, {plural(inv.stray_keys, 'stray key')} at {inv.location}",
        json_mode=args.json,
    )
    return 0
