"""``s3kv ls``: one row per namespace at a location."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

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
        description="One row per namespace: folder, model, dtype, parallel sizes (tp/pp/pcp/"
        "dcp), ranks present, blocks, bytes, oldest and newest write, manifest. Namespaces "
        "without a manifest (vLLM's object-store tier) are shown with model from the folder.",
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
        header = (
            "FOLDER",
            "MODEL",
            "DTYPE",
            "TP/PP/PCP/DCP",
            "RANKS",
            "BLOCKS",
            "BYTES",
            "OLDEST",
            "NEWEST",
            "MANIFEST",
        )
        rows = [header]
        for n in inv.namespaces:
            sizes = "/".join(
                str(x) if x is not None else "?"
                for x in (n.tp_size, n.pp_size, n.pcp_size, n.dcp_size)
            )
            manifest = (
                "yes"
                if n.manifest and not n.manifest_problem
                else ("BAD" if n.manifest else "none")
            )
            rows.append(
                (
                    f"{n.prefix}/{n.folder}" if n.prefix else n.folder,
                    n.model,
                    n.dtype or "?",
                    sizes,
                    ",".join(map(str, n.ranks)) or "-",
                    str(n.blocks),
                    format_bytes(n.bytes),
                    n.oldest.strftime("%Y-%m-%d %H:%M") if n.oldest else "-",
                    n.newest.strftime("%Y-%m-%d %H:%M") if n.newest else "-",
                    manifest,
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if inv.stray_keys:
            print(f"{inv.stray_keys} key(s) outside the vLLM layout (see 's3kv verify')")
    summary(
        f"ls: {len(inv.namespaces)} namespaces, {inv.blocks} blocks ({inv.unverified} "
        f"unverified), {format_bytes(inv.bytes)}, {inv.stray_keys} stray keys at {inv.location}",
        json_mode=args.json,
    )
    return 0
