"""``s3kv ls``: one row per namespace at a location."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from s3kv.cli.ls_table import render
from s3kv.cli.options import add_common, add_connection, settings_from_args
from s3kv.cli.progress import summary
from s3kv.cli.units import format_bytes
from s3kv.inventory import inventory

EXAMPLES = """\
examples:
  s3kv ls s3://my-bucket/kv
  s3kv ls s3://my-bucket --json | jq '.namespaces[] | {folder, blocks, bytes}'
  s3kv ls /mnt/kv
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
        "(model, bytes, timestamps, manifest).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("location", metavar="LOCATION", help="s3://bucket[/prefix] or a directory")
    add_connection(parser)
    add_common(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    inv = inventory(args.location, settings=settings_from_args(args))
    if args.json:
        data = asdict(inv)
        data["unverified"] = inv.unverified
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        for line in render(inv):
            print(line)
    summary(
        f"ls: {len(inv.namespaces)} namespaces, {inv.blocks} blocks ({inv.unverified} "
        f"unverified), {format_bytes(inv.bytes)}, {inv.stray_keys} stray keys at {inv.location}",
        json_mode=args.json,
    )
    return 0
