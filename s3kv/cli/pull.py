"""``s3kv pull``: a bucket's cache into a vLLM filesystem-tier directory."""

from __future__ import annotations

import argparse
from typing import Any

from s3kv.cli.options import settings_from_args, tenant_locations
from s3kv.cli.syncing import add_sync_flags, run_sync
from s3kv.errors import InvalidLocationError

EXAMPLES = """\
examples:
  # warm a new node's disk cache from S3 (files land as vLLM writes them)
  s3kv pull s3://my-bucket/kv /mnt/kv

  # one namespace, from MinIO, as JSON
  s3kv pull s3://kv-cache/kv /mnt/kv --namespace meta-llama_Llama-3.1-8B-Instruct_330cb72a4d52 \\
      --endpoint-url http://minio:9000 --json

  # blocks vLLM's object-store tier wrote (it writes no config.json)
  s3kv pull s3://my-bucket/obj /mnt/kv --allow-missing-manifest

  # a node's disk cache checked against the bucket: damaged local blocks replaced
  s3kv pull s3://my-bucket/kv /mnt/kv --checksum

Every key is parsed before a path is built from it: keys outside the layout ('..',
absolute paths, control characters) are refused and listed, never written. A local
block of another size than the bucket's (or, with --checksum, of another checksum) is
replaced from the bucket's verified copy (temp file + rename). A SRC with no namespace
directly under it fails with exit 7 and names the location meant.
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "pull",
        help="copy s3://bucket/prefix into a vLLM cache directory",
        description="Copy every namespace directly under a prefix into a directory in "
        "vLLM's filesystem-tier layout (temp file + rename; existing complete files "
        "skipped, damaged ones replaced).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("src", metavar="SRC", help="s3://bucket/prefix")
    parser.add_argument("dst", metavar="DST", help="a directory (created if missing)")
    add_sync_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from s3kv.naming.location import parse_location

    src, dst = tenant_locations(args, args.src, args.dst)
    source, destination = parse_location(src), parse_location(dst)
    if destination.path is None:
        raise InvalidLocationError(
            f"pull DST {args.dst!r} must be a directory (to copy between buckets use 's3kv cp')"
        )
    if destination.path.exists() and not destination.path.is_dir():
        raise InvalidLocationError(f"pull DST {args.dst!r} exists and is not a directory")
    return run_sync(args, source, destination, settings_from_args(args), label="pull")
