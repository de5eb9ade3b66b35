"""``s3kv demo``: push, list, verify and pull a realistic cache on an embedded endpoint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from s3kv.cli import jsondoc
from s3kv.cli.options import add_common, add_connection, settings_from_args, tenant_from_args
from s3kv.cli.progress import summary
from s3kv.errors import InvalidInputError, plural

EXAMPLES = """\
examples:
  # no AWS account needed: an embedded S3 endpoint on 127.0.0.1 (pip install 's3kv-vllm[demo]')
  s3kv demo

  # against a real store (the bucket is created if missing): only when named here
  s3kv demo --endpoint-url http://minio:9000 --bucket s3kv-demo

  # smaller, machine-readable
  s3kv demo --blocks 8 --json

  # keep the written cache and the pulled copy to look at afterwards
  s3kv demo --blocks 8 --keep ./s3kv-demo
  s3kv ls ./s3kv-demo/vllm-cache
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo",
        help="run the main job end to end on an embedded S3 endpoint",
        description="Write a synthetic vLLM cache (Llama-3.1-8B shapes: 32 layers, 8 KV "
        "heads x 128, bfloat16, 16 tokens/block = 2 MiB blocks), push it, list it, verify "
        "it, pull it into a fresh directory and compare byte for byte. Unless "
        "--endpoint-url names a store, an embedded S3 endpoint (moto) runs on 127.0.0.1 "
        "meanwhile: an endpoint from the environment (AWS_ENDPOINT_URL, S3KV_ENDPOINT_URL) "
        "or a profile is ignored, never written to.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bucket", default="s3kv-demo", help="default: s3kv-demo")
    parser.add_argument("--prefix", default="kv", help="default: kv")
    parser.add_argument("--blocks", type=int, default=64, help="blocks to write; default 64")
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="write the cache (DIR/vllm-cache) and the pulled copy (DIR/pulled) into DIR, a "
        "new or empty directory, and keep them; default: a temp directory, deleted",
    )
    add_connection(parser, writes=True)
    add_common(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from s3kv.naming.tenants import tenant_prefix
    from s3kv.ops.demo import run_demo

    if not 1 <= args.blocks <= 4096:
        raise InvalidInputError(f"--blocks {args.blocks}: give 1 to 4096")
    say = (lambda line: print(line, file=sys.stderr)) if args.json else print
    tenant = tenant_from_args(args)
    report = run_demo(
        settings_from_args(args),
        endpoint_url=args.endpoint_url,
        bucket=args.bucket,
        prefix=args.prefix if tenant is None else tenant_prefix(args.prefix, tenant),
        blocks=args.blocks,
        say=say,
        keep=Path(args.keep) if args.keep else None,
    )
    ok = report.identical and report.push.ok and report.pull.ok and report.verify.ok
    if args.json:
        jsondoc.emit(
            {
                "command": "demo",
                "ok": ok,
                "endpoint": report.endpoint,
                "embedded": report.embedded,
                "location": report.location,
                "blocks": report.blocks,
                "block_bytes": report.block_bytes,
                "identical": report.identical,
                "push_seconds": report.push.seconds,
                "pull_seconds": report.pull.seconds,
                "verify_findings": sum(report.verify.counts.values()),
                "seconds": report.seconds,
                "kept": str(report.kept) if report.kept else None,
            }
        )
    elif report.kept:
        print(f"kept: {report.kept}/vllm-cache (written), {report.kept}/pulled (pulled back)")
    summary(
        f"demo: {'OK' if ok else 'FAILED'}: {plural(report.blocks, 'block')} of 2 MiB pushed, "
        f"listed, verified and pulled back byte-identical={report.identical} in "
        f"{report.seconds:.2f}s ({'embedded' if report.embedded else report.endpoint})",
        json_mode=args.json,
    )
    return 0 if ok else 1
