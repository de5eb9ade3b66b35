"""``S3KV_TRACE_FILE``: one JSON line per S3 request s3kv makes.

What a least-privilege policy must grant, and what the test suite checks the Terraform
writer and reader policies against. Both data paths (boto3, awscrt) write here.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any
from urllib.parse import parse_qsl, unquote

from botocore.utils import determine_content_length

from s3kv.errors import SettingsError

TRACE_ENV = "S3KV_TRACE_FILE"
"""Append one JSON line per S3 request (operation, bucket, key or prefix, tags, size) to
this file: what to grant a least-privilege policy, and what the test suite checks the
Terraform policies against."""


_trace_lock = threading.Lock()


def trace_enabled() -> bool:
    return bool(os.environ.get(TRACE_ENV))


def trace(record: dict[str, Any]) -> None:
    """Append one request record to ``$S3KV_TRACE_FILE``, before the request is sent.

    A record that cannot be written stops its request with a :class:`SettingsError`
    naming the file: the trace is what a least-privilege policy is written from, so a
    request it misses is never sent."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    line = json.dumps(record, default=str) + "\n"
    try:
        with _trace_lock, open(path, "a", encoding="utf-8") as f:
            f.write(line)
    except OSError as exc:
        raise SettingsError(
            f"{TRACE_ENV}={path}: cannot append to it ({exc.strerror or exc}); point it at "
            f"a file you can write, or unset {TRACE_ENV}"
        ) from None


def trace_botocore(params: dict[str, Any], model: Any, **_: Any) -> None:
    record: dict[str, Any] = {"op": model.name, "bucket": params.get("Bucket", "")}
    for name in ("Key", "Prefix"):
        if name in params:
            record[name.lower()] = params[name]
    source: Any = params.get("CopySource")
    if isinstance(source, str):  # botocore has already encoded it as "bucket/key"
        src_bucket, _sep, src_key = unquote(source.split("?", 1)[0]).lstrip("/").partition("/")
        source = {"Bucket": src_bucket, "Key": src_key}
    if source is not None:
        record["copy_source"] = source
    tagging = params.get("Tagging")
    if isinstance(tagging, str):
        record["tags"] = dict(parse_qsl(tagging))
    elif isinstance(tagging, dict):
        record["tags"] = {t["Key"]: t["Value"] for t in tagging.get("TagSet", ())}
    if "SSECustomerKeyMD5" in params:  # which tenant's key (its MD5; never the key)
        record["sse_c_key_md5"] = params["SSECustomerKeyMD5"]
    if "CopySourceSSECustomerKeyMD5" in params:
        record["copy_source_sse_c_key_md5"] = params["CopySourceSSECustomerKeyMD5"]
    if "Body" in params:
        record["size"] = determine_content_length(params["Body"])
    if "Delete" in params:
        objects = params["Delete"].get("Objects", ())
        record["keys"] = [o["Key"] for o in objects]
        if any("VersionId" in o for o in objects):  # s3:DeleteObjectVersion, not DeleteObject
            record["op"] = "DeleteObjectVersion"
    trace(record)
