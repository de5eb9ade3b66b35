"""The world the examples name: caches in /mnt and in buckets, laid out afresh each time.

* ``/mnt/kv``: a node's vLLM disk cache (vLLM's filesystem-tier layout): the demo's
  Llama-3.1-8B-Instruct namespace (digest ``330cb72a4d52``, the one the examples name)
  and a Qwen3-8B one with two ranks; ``/mnt/kv-old`` a copy of it.
* ``s3://my-bucket/kv``, ``s3://team-a/kv``, ``s3://kv-cache/kv``: that cache pushed by
  s3kv (checksums recorded); ``s3://my-bucket/obj``: blocks as vLLM's object-store tier
  leaves them (no manifest, no checksum).
* empty buckets the examples write into: ``team-b``, ``aws-bucket``, ``kv-bucket``,
  ``my-kv-bucket``.
* tenants ``acme`` and ``globex`` under ``s3://my-bucket/kv`` (``kv/tenants/<tenant>/``),
  each that cache pushed with its own key derived from the secret in
  ``/mnt/secrets/s3kv-sse-c`` (docs/tenants.md; moto keeps no key, but s3kv sends them).

Blocks are 4 KiB (a real row of this model is 2 MiB): the keys, digests and manifests are
the real ones, the bytes small. Laying it out takes about two seconds (three pushes), so
it is laid out again only after an example changed it: :func:`fingerprint` reads every
bucket (objects, versions, delete markers, tags, uploads, versioning) and every file and
folder under /mnt, and an example that left them as they were leaves the world as it is.
"""

from __future__ import annotations

import os
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from s3kv import KeyMapper, Namespace, S3Settings, make_offload_key
from s3kv.naming.location import parse_location
from s3kv.ops.demo import demo_namespace
from s3kv.ops.sync import sync
from s3kv.stores import LocalStore, PutOptions

ACCESS_KEY = "s3kv-examples"
BUCKETS = ("my-bucket", "team-a", "team-b", "kv-cache", "aws-bucket", "kv-bucket",
           "my-kv-bucket")  # fmt: skip
CACHES = ("s3://my-bucket/kv", "s3://team-a/kv", "s3://kv-cache/kv")
TENANTS = ("acme", "globex")
SECRET = "mnt-secrets-s3kv-sse-c-the-examples-secret-of-48-bytes"  # the examples' own
BLOCK = 4096
BLOCKS = 4


def namespaces() -> list[Namespace]:
    qwen = Namespace(
        model_name="Qwen/Qwen3-8B", tokens_per_hash=16, dtype="bfloat16", tp_size=2,
        kv_cache_groups=[{"tokens_per_block": 16,
                          "layer_names": [f"model.layers.{i}.self_attn.attn" for i in range(36)]}],
    )  # fmt: skip
    return [demo_namespace(), qwen]


def write_node_cache(root: Path) -> None:
    store = LocalStore(root)
    for n, ns in enumerate(namespaces()):
        store.put(KeyMapper(ns).config_key(), ns.manifest_bytes(), PutOptions())
        for rank in range(ns.tp_size):
            keys = KeyMapper(ns.for_rank(rank))
            for i in range(BLOCKS):
                block_hash = bytes([n, rank, i]) * 11
                row = (block_hash * (BLOCK // len(block_hash) + 1))[:BLOCK]
                store.put(keys.key_for(make_offload_key(block_hash[:32], 0)), row, PutOptions())


def client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=ACCESS_KEY, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}))  # fmt: skip


def fingerprint(s3: Any, mnt: Path) -> list[object]:
    """Everything an example could change, read back through ``s3`` (a :func:`client`):
    equal fingerprints, same world."""
    seen: list[object] = []
    for bucket in sorted(b["Name"] for b in s3.list_buckets()["Buckets"]):
        seen.append((bucket, s3.get_bucket_versioning(Bucket=bucket).get("Status")))
        seen.append(s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []))
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            for marker in page.get("DeleteMarkers", []):
                seen.append(("deleted", marker["Key"], marker["VersionId"]))
            for v in page.get("Versions", []):
                tags = s3.get_object_tagging(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
                seen.append((v["Key"], v["VersionId"], v["ETag"], v["Size"],
                             v["LastModified"], tags["TagSet"]))  # fmt: skip
    for folder, dirs, files in os.walk(mnt):
        for name in sorted(dirs) + sorted(files):
            st = os.lstat(os.path.join(folder, name))
            seen.append((folder, name, st.st_mode, st.st_size, st.st_mtime_ns))
    return seen


def reset(endpoint: str, s3: Any, mnt: Path) -> None:
    """Empty moto and /mnt, then lay the world out again (``s3``: a :func:`client`)."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    urllib.request.urlopen(request, timeout=30).close()
    for child in mnt.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    for bucket in BUCKETS:
        s3.create_bucket(Bucket=bucket)
    write_node_cache(mnt / "kv")
    shutil.copytree(mnt / "kv", mnt / "kv-old")
    settings = S3Settings.resolve(endpoint_url=endpoint, access_key_id=ACCESS_KEY,
                                  secret_access_key=ACCESS_KEY, region="us-east-1")  # fmt: skip
    for url in CACHES:
        report = sync(mnt / "kv", url, settings=settings)
        assert report.ok, report
    secret = mnt / "secrets" / "s3kv-sse-c"
    secret.parent.mkdir()
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    keyed = settings.model_copy(update={"sse_c_secret_file": secret})
    for tenant in TENANTS:
        report = sync(mnt / "kv", parse_location(CACHES[0]).for_tenant(tenant), settings=keyed)
        assert report.ok, report
    obj = KeyMapper(namespaces()[0], prefix="obj", style="vllm-obj")
    for i in range(BLOCKS):
        key = obj.key_for(make_offload_key(bytes([9, i]) * 16, 0))
        s3.put_object(Bucket="my-bucket", Key=key, Body=bytes([i]) * BLOCK)
