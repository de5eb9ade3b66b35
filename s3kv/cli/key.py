"""``s3kv key``: show a namespace and where its blocks live, without touching a store."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from s3kv.cli import jsondoc
from s3kv.cli.options import (
    add_common,
    add_namespace,
    add_tenant,
    dumps,
    namespace_from_args,
    tenant_from_args,
)
from s3kv.errors import InvalidKeyError

EXAMPLES = """\
examples:
  # the folder, digest and manifest key of a deployment, and one block's key: give one
  # --group per KV-cache group, in vLLM's order (they are hashed into the digest)
  s3kv key s3://my-bucket/kv --model meta-llama/Llama-3.1-8B-Instruct \\
      --tokens-per-hash 16 --dtype bfloat16 \\
      --group 16:model.layers.0.self_attn.attn,model.layers.1.self_attn.attn \\
      --block-hash 00a1b2c3d4e5f607

  # the same for a tree vLLM's filesystem tier wrote (namespace from its config.json)
  s3kv key /mnt/kv --manifest /mnt/kv/meta-llama_Llama-3.1-8B-Instruct_330cb72a4d52/config.json

  # keys as vLLM's object-store tier stores them (the same layout), as JSON
  s3kv key s3://my-bucket/kv --style vllm-obj --model m --tokens-per-hash 16 \\
      --dtype float16 --group 16:model.layers.0.self_attn.attn --parallel-agnostic \\
      --block-hash 00a1b2 --json
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "key",
        help="print a namespace's digest, manifest key and block keys (no I/O)",
        description="Print a namespace (fields, digest, manifest key) and the key of each "
        "given block hash, exactly as vLLM 0.33.0's FileMapper names them. The KV-cache "
        "groups (--group, with their layer names) are hashed into the digest: without "
        "them the digest is another namespace's than any real deployment's (every vLLM "
        "model has at least one group). --manifest reads all the fields from a config.json.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "location",
        nargs="?",
        default="",
        help="s3://bucket/prefix or a directory (default: keys relative to the root)",
    )
    parser.add_argument(
        "--block-hash",
        action="append",
        default=[],
        metavar="HEX",
        help="a block hash in hex (repeatable)",
    )
    parser.add_argument("--group-idx", type=int, default=0, help="KV-cache group index; default 0")
    parser.add_argument(
        "--style",
        choices=["s3kv", "vllm-obj"],
        default="s3kv",
        help="key layout; 'vllm-obj' (vLLM's object-store tier) is an alias of 's3kv'",
    )
    add_namespace(parser)
    add_tenant(parser, key_source=False)
    add_common(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from s3kv.naming.keys import KeyMapper, make_offload_key
    from s3kv.naming.location import parse_location
    from s3kv.ops.scope import own_folder

    namespace = namespace_from_args(args)
    from s3kv.naming.tenants import tenant_prefix

    location = parse_location(args.location) if args.location else None
    tenant = tenant_from_args(args)
    if location is not None and tenant is not None:
        location = location.for_tenant(tenant)
    prefix = location.prefix if location else ""
    if location is None and tenant is not None:
        prefix = tenant_prefix("", tenant)
    mapper = KeyMapper(namespace, prefix=prefix, style=args.style)

    def address(key: str) -> str:
        return location.url_for(key) if location else key

    blocks = []
    for text in args.block_hash:
        try:
            block_hash = bytes.fromhex(text)
        except ValueError:
            raise InvalidKeyError(
                f"--block-hash {text!r} is not hex; give the hash as hex digits, e.g. 00a1b2c3"
            ) from None
        offload_key = make_offload_key(block_hash, args.group_idx)
        blocks.append(
            {
                "block_hash": text.lower(),
                "group_idx": args.group_idx,
                "offload_key": offload_key.hex(),
                "key": address(mapper.key_for(offload_key)),
            }
        )
    folder = own_folder(location) if location is not None else None
    if folder is not None:  # keys would land one level too low
        print(
            f"s3kv key: note: {location} is a namespace's folder, one level below a cache: "
            f"keys are laid out under the cache's location, {folder[0]} - did you mean that?",
            file=sys.stderr,
        )
    if not args.manifest and not args.groups:
        print(
            "s3kv key: note: no --group given, so no KV-cache group is hashed: this digest "
            "matches no real vLLM deployment; give one --group TOKENS:LAYER,... per group "
            "(vLLM's order), or --manifest FILE",
            file=sys.stderr,
        )
    result = {
        "command": "key",
        "ok": True,
        "folder": namespace.folder,
        "digest": namespace.digest,
        "rank": namespace.rank,
        "style": args.style,
        "fields": namespace.fields,
        "manifest_key": address(mapper.config_key()),
        "rank_prefix": address(mapper.rank_prefix()),
        "block_keys": blocks,
    }
    if args.json:
        jsondoc.emit(result)
        return 0
    print(f"namespace  {namespace.folder}  (digest {namespace.digest}, rank {namespace.rank})")
    print(f"manifest   {result['manifest_key']}")
    print(f"blocks in  {result['rank_prefix']}")
    print("fields     " + dumps(namespace.fields).replace("\n", "\n           "))
    for block in blocks:
        print(f"block      {block['block_hash']} g{block['group_idx']} -> {block['key']}")
    return 0
