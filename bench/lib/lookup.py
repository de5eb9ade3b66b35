"""Lookup rows: how far a chain of blocks is stored, s3kv's ``lookup`` against a HEAD loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.lib.blocks import namespace, object_keys, offload_keys, payload
from bench.lib.clients import boto3_client, s3kv_settings


def prepare_lookup(spec: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    bucket, chain = spec["bucket"], spec["chain"]
    keys = offload_keys(spec["seed"], chain)
    if spec["client"] == "s3kv":
        from s3kv import Downloader

        d = Downloader(f"s3://{bucket}/{spec['prefix']}", namespace(), settings=s3kv_settings(spec))
        d.contains([])  # manifest check, once per Downloader

        def action() -> dict[str, Any]:
            found = d.lookup(keys)
            return {
                "found": found,
                "rounds": d.last_lookup.rounds,
                "requests": d.last_lookup.requests,
            }

        return action
    if spec["client"] == "naive-head":
        from botocore.exceptions import ClientError

        s3 = boto3_client(spec)
        names = object_keys(spec, keys)

        def action() -> dict[str, Any]:
            found = requests = 0
            for name in names:
                requests += 1
                try:
                    s3.head_object(Bucket=bucket, Key=name)
                except ClientError as exc:
                    if exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
                        break
                    raise
                found += 1
            return {"found": found, "rounds": requests, "requests": requests}

        return action
    raise SystemExit(f"unknown lookup client {spec['client']!r}")


def populate(spec: dict[str, Any]) -> dict[str, Any]:
    """Store the first ``count`` blocks of a chain with s3kv (lookup setup, untimed)."""
    import numpy as np

    from s3kv import Uploader

    keys = offload_keys(spec["seed"], spec["count"])
    row = np.frombuffer(payload(spec["seed"], 0, spec["size"]), dtype=np.uint8)
    with Uploader(
        f"s3://{spec['bucket']}/{spec['prefix']}", namespace(), settings=s3kv_settings(spec)
    ) as up:
        report = up.put_blocks({k: row for k in keys})
    return {"ok": len(report.stored) + len(report.already_present), "failed": len(report.failed)}
