"""``s3kv push``: a vLLM filesystem-tier directory into a bucket."""

from __future__ import annotations

import argparse
from typing import Any

from s3kv.cli.options import settings_from_args, tenant_locations
from s3kv.cli.syncing import add_sync_flags, run_sync
from s3kv.errors import InvalidLocationError

EXAMPLES = """\
examples:
  # back up a node's disk cache (every namespace under /mnt/kv)
  s3kv push /mnt/kv s3://my-bucket/kv

  # one model's namespace, rank 0 only, to MinIO; see first what would go
  s3kv push /mnt/kv s3://kv-cache/kv --namespace 330cb72a4d52 --rank 0 \\
      --endpoint-url http://minio:9000 --dry-run

  # a re-run (after Ctrl-C or a failure) sends only what is missing
  s3kv push /mnt/kv s3://my-bucket/kv --json

  # also read the blocks already in the bucket and replace any that fail their check
  s3kv push /mnt/kv s3://my-bucket/kv --checksum

SRC is the directory vLLM's filesystem tier writes to (it holds <model>_<digest>
folders). A SRC with no namespace directly under it fails with exit 7 and names the
directory meant (one level down or up, or a close name); --allow-empty accepts an empty
one.
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "push",
        help="copy a vLLM cache directory to s3://bucket/prefix",
        description="Copy every namespace of a vLLM filesystem-tier directory (config.json "
        "first, then blocks) to a bucket: create-only, concurrent, checksummed, resumable.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("src", metavar="SRC", help="a vLLM filesystem-tier root directory")
    parser.add_argument("dst", metavar="DST", help="s3://bucket/prefix")
    add_sync_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from s3kv.naming.location import parse_location

    src, dst = tenant_locations(args, args.src, args.dst)
    source, destination = parse_location(src), parse_location(dst)
    # A SRC that does not exist is a location that holds nothing: the sync names the
    # closest directory (exit 7). One that is no directory is a usage error.
    if source.path is None or (source.path.exists() and not source.path.is_dir()):
        raise InvalidLocationError(
            f"push SRC {args.src!r} is not a directory; give the root vLLM's filesystem tier "
            "writes to (to copy from a bucket use 's3kv cp')"
        )
    return run_sync(args, source, destination, settings_from_args(args), label="push")
