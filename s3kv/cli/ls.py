"""``s3kv ls``: one row per namespace at a location."""

from __future__ import annotations

import argparse
import shutil
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
from s3kv.errors import InvalidInputError, plural
from s3kv.units import format_bytes

EXAMPLES = """\
examples:
  s3kv ls s3://my-bucket/kv
  s3kv ls s3://my-bucket/kv --json | jq '.namespaces[] | {folder, blocks, bytes}'
  s3kv ls /mnt/kv

  # a location's tenants (namespaces, blocks, bytes of each), then one tenant's namespaces
  s3kv ls s3://my-bucket/kv
  s3kv ls s3://my-bucket/kv --tenant acme --sse-c-secret-file /mnt/secrets/s3kv-sse-c

  # for node_exporter's textfile collector: run from cron in its directory (the rename
  # makes the file appear whole, as node_exporter asks)
  s3kv ls s3://my-bucket/kv --prometheus > s3kv.prom.tmp && mv s3kv.prom.tmp s3kv.prom

A location holds the namespaces directly under it, and its tenants' parts
(<location>/tenants/<tenant>, listed in a table of their own). One that holds neither
fails with exit 7 and names the location meant (caches one level down, a namespace
folder's parent, a close name); --allow-empty accepts an empty one.
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "ls",
        help="list the namespaces (models, ranks, blocks, bytes) at a location",
        description="One row per namespace: folder (on a terminal cut in the middle to fit "
        "it; into a file or pipe never cut), dtype, parallel sizes (tp/pp/pcp/dcp), ranks "
        "present, blocks, size, and how long ago the oldest..newest block was last written "
        "or used; a second table splits the bytes by time since last use (<1h, 1h-1d, "
        "1d-7d, >7d); a third gives the block size and when the manifest was created and by "
        "which s3kv and vLLM (s3kv's record in it; '-' where not recorded). Namespaces without a "
        "manifest (vLLM's object-store tier) are noted below the tables. --json has every "
        "field in full (model, bytes, RFC 3339 times, manifest status); --prometheus the "
        "bytes and blocks per namespace and time since last use, in Prometheus's text format.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("location", metavar="LOCATION", help="s3://bucket[/prefix] or a directory")
    parser.add_argument(
        "--prometheus",
        action="store_true",
        help="print Prometheus's text format (node_exporter's textfile collector): bytes "
        "and blocks per namespace and time since last use (docs/metrics.md)",
    )
    add_allow_empty(parser)
    add_connection(parser, concurrency=False)
    add_common(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.json and args.prometheus:
        raise InvalidInputError("give --json or --prometheus, not both")
    from s3kv.cli.ls_table import WIDTH, render
    from s3kv.ops.inventory import inventory

    with watching("ls", resume="ls changes nothing; run it again.") as progress:
        inv = inventory(
            tenant_locations(args, args.location)[0],
            settings=settings_from_args(args),
            allow_empty=args.allow_empty,
            on_progress=progress,
        )
    if args.json:
        jsondoc.emit(jsondoc.ls(inv))
    elif args.prometheus:
        from s3kv.cli.ls_prometheus import exposition

        sys.stdout.write(exposition(inv))
    else:
        # On a terminal the tables fit it; into a file or a pipe nothing is cut.
        width = max(shutil.get_terminal_size().columns, WIDTH) if sys.stdout.isatty() else None
        for line in render(inv, width=width):
            print(line)
        print_nested(inv.location, inv.nested)
        for why in inv.not_files:
            print(f"note: {why}")
    tenants = f", {plural(len(inv.tenants), 'tenant')}" if inv.tenants else ""
    summary(
        f"ls: {plural(len(inv.namespaces), 'namespace')}, {plural(inv.blocks, 'block')}, "
        f"{format_bytes(inv.bytes)}, {plural(inv.stray_keys, 'stray key')}{tenants} at "
        f"{inv.location}",
        json_mode=args.json or args.prometheus,
    )
    return 0
