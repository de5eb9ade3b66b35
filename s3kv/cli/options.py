"""Flags shared by several commands.

Nothing here imports the library at module level: every command registers its flags
from this module when ``s3kv --help`` builds the parser, which must not wait for boto3
or pydantic (the library is imported by each command's ``run``).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from s3kv.errors import InvalidInputError, InvalidNamespaceError

if TYPE_CHECKING:
    from s3kv.naming.namespace import Namespace

CHECKSUM_ALGORITHMS = ["crc32c", "crc32", "sha256", "none"]


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON on stdout (errors too; schema in docs/operations.md)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")


def add_allow_empty(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="an existing location with nothing at all under it is not an error (exit 0, "
        "not 7); a directory that does not exist still is",
    )


def add_namespace(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "namespace (vLLM run config; or --manifest to read it from a config.json)"
    )
    group.add_argument("--manifest", metavar="FILE", help="read the namespace from a config.json")
    group.add_argument(
        "--model", dest="model_name", help="model name, e.g. meta-llama/Llama-3.1-8B"
    )
    group.add_argument("--tokens-per-hash", type=int, help="tokens per block hash (block size)")
    group.add_argument("--dtype", help="KV-cache dtype as vLLM names it, e.g. bfloat16")
    group.add_argument("--blocks-per-file", type=int, default=1, help="default: 1")
    for name in ("tp", "pp", "pcp", "dcp"):
        group.add_argument(f"--{name}-size", type=int, default=1, help="default: 1")
    group.add_argument("--rank", type=int, default=0, help="worker rank (not hashed); default 0")
    group.add_argument(
        "--group",
        dest="groups",
        action="append",
        metavar="TOKENS:LAYER[,LAYER...]",
        help="a KV-cache group, e.g. 16:model.layers.0.self_attn.attn,model.layers.1.self_attn.attn"
        " (repeat per group, in vLLM's order)",
    )
    group.add_argument("--inference-engine", default="vllm", help="default: vllm")
    group.add_argument("--parallel-agnostic", action="store_true")
    group.add_argument("--replicated-layout", action="store_true")
    group.add_argument("--canonical-format", help="e.g. v1-nhd")


def namespace_from_args(args: argparse.Namespace) -> Namespace:
    from s3kv.naming.manifest import MAX_MANIFEST_BYTES
    from s3kv.naming.namespace import Namespace

    if args.manifest:
        try:
            with open(args.manifest, "rb") as f:
                data = f.read(MAX_MANIFEST_BYTES + 1)  # the parser refuses anything larger
        except OSError as exc:
            raise InvalidNamespaceError(
                f"cannot read manifest {args.manifest!r}: {exc.strerror}"
            ) from None
        return Namespace.from_manifest(data, rank=args.rank)
    missing = [
        flag
        for flag, value in (
            ("--model", args.model_name),
            ("--tokens-per-hash", args.tokens_per_hash),
            ("--dtype", args.dtype),
        )
        if value is None
    ]
    if missing:
        raise InvalidNamespaceError(
            f"missing {', '.join(missing)}: give the run config's fields, or --manifest FILE"
        )
    kw: dict[str, Any] = {
        "model_name": args.model_name,
        "tokens_per_hash": args.tokens_per_hash,
        "dtype": args.dtype,
        "blocks_per_file": args.blocks_per_file,
        "tp_size": args.tp_size,
        "pp_size": args.pp_size,
        "pcp_size": args.pcp_size,
        "dcp_size": args.dcp_size,
        "rank": args.rank,
        "kv_cache_groups": [_parse_group(g) for g in args.groups or []],
        "inference_engine": args.inference_engine,
        "parallel_agnostic": args.parallel_agnostic,
        "replicated_layout": args.replicated_layout,
        "canonical_format": args.canonical_format,
    }
    return Namespace(**kw)


def _parse_group(text: str) -> dict[str, Any]:
    tokens, sep, layers = text.partition(":")
    if not sep or not tokens.isdigit():
        raise InvalidNamespaceError(
            f"--group {text!r}: expected TOKENS:LAYER[,LAYER...], e.g. 16:layers.0,layers.1"
        )
    return {"tokens_per_block": int(tokens), "layer_names": [n for n in layers.split(",") if n]}


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)


def add_connection(
    parser: argparse.ArgumentParser, *, writes: bool = False, concurrency: bool = True
) -> None:
    """Connection flags; unset ones fall back to S3KV_* then AWS_* variables. Only commands
    that write blocks take ``--checksum-algorithm``, only those that run requests
    concurrently ``--concurrency``: a flag that does nothing is not offered."""
    group = parser.add_argument_group("connection (default: S3KV_* then AWS_* variables)")
    group.add_argument("--endpoint-url", help="S3-compatible endpoint, e.g. http://minio:9000")
    group.add_argument("--region", help="e.g. us-east-1")
    group.add_argument("--profile", help="a profile of ~/.aws/config")
    group.add_argument(
        "--path-style",
        action="store_const",
        const="path",
        dest="addressing_style",
        help="path-style addressing (MinIO, Ceph; the default with --endpoint-url)",
    )
    if writes:
        group.add_argument(
            "--checksum-algorithm",
            choices=CHECKSUM_ALGORITHMS,
            help="checksum recorded with each block written; default crc32c",
        )
    if concurrency:
        group.add_argument("--concurrency", type=int, help="requests in flight; default 32")
    group.add_argument("--ca-bundle", help="PEM file of CAs to trust (private endpoints)")
    group.add_argument(
        "--proxy-ca-bundle",
        help="PEM file of CAs to trust for an https:// proxy (HTTPS_PROXY); botocore's path",
    )
    group.add_argument(
        "--no-verify-tls",
        action="store_const",
        const=False,
        dest="verify_tls",
        help="do not verify TLS certificates (testing only)",
    )
    add_tenant(parser, key_source=True)


TENANT_ENV = "S3KV_TENANT"


def add_tenant(parser: argparse.ArgumentParser, *, key_source: bool) -> None:
    """``--tenant`` (and, for commands that send requests, the key source)."""
    group = parser.add_argument_group("tenants (docs/tenants.md)")
    group.add_argument(
        "--tenant",
        metavar="NAME",
        help=f"act on tenant NAME's part of each s3:// location, <prefix>/tenants/NAME "
        f"(default: ${TENANT_ENV})",
    )
    if key_source:
        group.add_argument(
            "--sse-c-secret-file",
            metavar="PATH",
            help="the file of the secret each tenant's key is derived from: its objects are "
            "written and read encrypted with that key (SSE-C; default: "
            "$S3KV_SSE_C_SECRET_FILE)",
        )


def tenant_from_args(args: argparse.Namespace) -> str | None:
    """The tenant a command acts for: ``--tenant``, else ``$S3KV_TENANT``, checked."""
    from s3kv.naming.tenants import check_tenant

    given = getattr(args, "tenant", None)
    value = given if given is not None else os.environ.get(TENANT_ENV) or None
    if value is None:
        return None
    return check_tenant(value, source="--tenant" if given is not None else f"${TENANT_ENV}")


def tenant_locations(args: argparse.Namespace, *texts: str) -> list[str]:
    """The command's locations, each ``s3://`` one moved to the tenant's part of it
    (``<prefix>/tenants/<tenant>``) when a tenant is given; a directory is one cache as
    it is. A tenant given to a command with no ``s3://`` location is refused."""
    from s3kv.naming.location import parse_location

    tenant = tenant_from_args(args)
    if tenant is None:
        return list(texts)
    parsed = [parse_location(t) for t in texts]
    if not any(loc.is_s3 for loc in parsed):
        raise InvalidInputError(
            f"--tenant {tenant} applies to s3:// locations (<prefix>/tenants/{tenant}); a "
            "directory holds one cache as it is: give the tenant's directory itself"
        )
    return [loc.for_tenant(tenant).url if loc.is_s3 else text
            for loc, text in zip(parsed, texts)]


def settings_from_args(args: argparse.Namespace, **overrides: Any) -> Any:
    """:class:`s3kv.S3Settings` from the connection flags (then the environment)."""
    from s3kv.settings import S3Settings

    values = {
        "endpoint_url": args.endpoint_url,
        "region": args.region,
        "profile": args.profile,
        "addressing_style": args.addressing_style,
        "checksum": getattr(args, "checksum_algorithm", None),
        "concurrency": getattr(args, "concurrency", None),
        "ca_bundle": args.ca_bundle,
        "proxy_ca_bundle": args.proxy_ca_bundle,
        "verify_tls": args.verify_tls,
        "sse_c_secret_file": getattr(args, "sse_c_secret_file", None),
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    return S3Settings.resolve(**values)
