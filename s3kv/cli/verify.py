"""``s3kv verify``: manifests, layout, block sizes, checksums (``--deep``), orphans."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from s3kv.cli.options import add_common, add_connection, settings_from_args
from s3kv.cli.progress import summary
from s3kv.cli.units import format_bytes
from s3kv.verify import verify

EXAMPLES = """\
examples:
  # quick: listing and manifests only
  s3kv verify s3://my-bucket/kv

  # read every block and check the checksum recorded when it was stored
  s3kv verify s3://my-bucket/kv --deep --concurrency 64

  # in a script: exit code 1 when anything is found
  s3kv verify /mnt/kv --json > findings.json || echo "problems found"
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "verify",
        help="check manifests, keys, block sizes and (--deep) checksums",
        description="Check a location: manifests hash to their folder digests; every key "
        "follows the layout; blocks of a namespace and rank share one size (an odd-sized "
        "one is short or corrupt); --deep reads every block and checks its checksum; "
        "blocks without a manifest (orphans) and stray keys are listed. Exit code 1 on "
        "any finding.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("location", metavar="LOCATION", help="s3://bucket[/prefix] or a directory")
    parser.add_argument("--deep", action="store_true", help="read and checksum every block")
    add_connection(parser)
    add_common(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    report = verify(
        args.location,
        settings=settings_from_args(args),
        deep=args.deep,
        concurrency=args.concurrency,
    )
    if args.json:
        data = asdict(report)
        data["ok"] = report.ok
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        for finding in report.findings:
            print(f"{finding.kind}: {finding.key!r}: {finding.message}")
    found = sum(report.counts.values())
    detail = ", ".join(f"{n} {kind}" for kind, n in sorted(report.counts.items()))
    deep = (
        f"; {report.blocks_read} read ({format_bytes(report.bytes_read)})" if report.deep else ""
    )
    summary(
        f"verify: {report.namespaces} namespaces, {report.blocks} blocks{deep}, "
        f"{report.unverified} unverified; "
        f"{found} findings{': ' + detail if detail else ''} in {report.seconds:.2f}s "
        f"at {report.location}",
        json_mode=args.json,
    )
    return 0 if report.ok else 1
