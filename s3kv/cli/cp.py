"""``s3kv cp``: between any two locations (buckets, endpoints, directories)."""

from __future__ import annotations

import argparse
from typing import Any

from s3kv.cli.options import settings_from_args, tenant_locations
from s3kv.cli.syncing import add_sync_flags, run_sync

EXAMPLES = """\
examples:
  # share a cache with another cluster's bucket (server-side copy: one endpoint)
  s3kv cp s3://team-a/kv s3://team-b/kv

  # from an on-prem MinIO to AWS S3 (bytes stream through this machine); the other way,
  # name AWS's endpoint: --source-endpoint-url https://s3.us-east-1.amazonaws.com
  s3kv cp s3://kv-cache/kv s3://aws-bucket/kv --source-endpoint-url http://minio:9000 \\
      --region us-east-1

  # between two directories, or a directory and a bucket
  s3kv cp /mnt/kv-old /mnt/kv-new
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "cp",
        help="copy a cache between any two locations",
        description="Copy every namespace between two locations (buckets, endpoints, "
        "directories): manifests first, create-only, resumable; server-side when both "
        "are on one endpoint. Connection flags apply to the destination and, unless the "
        "--source-* flags say otherwise, to the source.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("src", metavar="SRC", help="s3://bucket/prefix or a directory")
    parser.add_argument("dst", metavar="DST", help="s3://bucket/prefix or a directory")
    group = parser.add_argument_group("source connection (default: the same as DST's)")
    group.add_argument("--source-endpoint-url", help="the source's endpoint")
    group.add_argument("--source-region", help="the source's region")
    group.add_argument("--source-profile", help="the source's profile")
    add_sync_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from s3kv.naming.location import parse_location

    src, dst = tenant_locations(args, args.src, args.dst)
    source, destination = parse_location(src), parse_location(dst)
    settings = settings_from_args(args)
    source_settings = settings_from_args(
        args,
        endpoint_url=args.source_endpoint_url,
        region=args.source_region,
        profile=args.source_profile,
    )
    return run_sync(
        args, source, destination, settings, source_settings=source_settings, label="cp"
    )
