"""The CLI's read commands with reader rights only, on Ceph RGW.

A second RGW user holds what terraform/'s reader policy grants (ListBucket held to the
prefix, GetObject under it). ``ls``, ``verify`` (plain and ``--deep``), ``pull`` and
``key`` work for it and send no write (``S3KV_TRACE_FILE``); ``push`` is refused with
the access-denied exit code, without a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from s3kv import Namespace, S3Settings, Uploader
from s3kv.naming.keys import make_offload_key
from tests.servers.rgw_users import create_user, grant_reader

# Among the slowest tests, needed at that cost: Ceph users and their policies are made
# with radosgw-admin (a process each), then every read command runs as a process.
pytestmark = [pytest.mark.integration, pytest.mark.rgw]

PREFIX = "team/kv"
BLOCK = 4096
READS = {"ListObjectsV2", "GetObject", "HeadObject"}


def test_read_commands_work_with_reader_rights(rgw: Any, tmp_path: Path) -> None:
    owner = boto3.session.Session().client(
        "s3", endpoint_url=rgw.http_endpoint, aws_access_key_id=rgw.access_key,
        aws_secret_access_key=rgw.secret_key, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}))
    bucket = f"s3kv-cli-reader-{uuid.uuid4().hex[:8]}"
    owner.create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/{PREFIX}"
    ns = Namespace(model_name="Qwen/Qwen3-0.6B", tokens_per_hash=16, dtype="bfloat16")
    hashes = [bytes([i]) * 32 for i in range(1, 6)]
    settings = S3Settings.resolve(endpoint_url=rgw.http_endpoint,
                                  access_key_id=rgw.access_key, secret_access_key=rgw.secret_key)
    with Uploader(url, ns, settings=settings) as up:
        up.put_blocks({make_offload_key(h, 0): h * (BLOCK // 32) for h in hashes}
                      ).raise_for_failures()
    reader = create_user(rgw, "s3kv-cli-reader")
    grant_reader(owner, bucket, PREFIX, reader)

    trace = tmp_path / "trace.jsonl"
    trace.write_text("")
    env = {**os.environ, "S3KV_ENDPOINT_URL": rgw.http_endpoint,
           "S3KV_ACCESS_KEY_ID": reader.access_key, "S3KV_SECRET_ACCESS_KEY": reader.secret_key,
           "S3KV_TRACE_FILE": str(trace)}

    def s3kv(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "s3kv.cli", *args], capture_output=True,
                              text=True, timeout=120, env=env)

    ls = s3kv("ls", url, "--json")
    assert ls.returncode == 0, ls.stderr
    (row,) = json.loads(ls.stdout)["namespaces"]
    assert (row["model"], row["blocks"], row["manifest"]) == ("Qwen/Qwen3-0.6B", 5, "present")
    for args in (("verify", url), ("verify", url, "--deep")):
        result = s3kv(*args)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "0 findings" in result.stdout
    pull = s3kv("pull", url, str(tmp_path / "local"))
    assert pull.returncode == 0, pull.stderr
    assert len(list((tmp_path / "local").rglob("*.bin"))) == 5
    key = s3kv("key", url, "--model", "Qwen/Qwen3-0.6B", "--tokens-per-hash", "16",
               "--dtype", "bfloat16", "--block-hash", hashes[0].hex(), "--json")
    assert key.returncode == 0, key.stderr
    assert json.loads(key.stdout)["folder"] == ns.folder
    ops = {json.loads(line)["op"] for line in trace.read_text().splitlines()}
    assert ops and ops <= READS, ops

    push = s3kv("push", str(tmp_path / "local"), f"{url}/copy")
    assert push.returncode == 4, push.stdout + push.stderr
    assert "Traceback" not in push.stderr
    assert "denied" in push.stderr.lower()


def test_gc_with_reader_rights_is_told_it_may_not_write(rgw: Any, tmp_path: Path) -> None:
    """A reader's gc stops before deleting anything, naming the cause (no write rights)
    and the fix."""
    owner = boto3.session.Session().client(
        "s3", endpoint_url=rgw.http_endpoint, aws_access_key_id=rgw.access_key,
        aws_secret_access_key=rgw.secret_key, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}))
    bucket = f"s3kv-gc-reader-{uuid.uuid4().hex[:8]}"
    owner.create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/{PREFIX}"
    ns = Namespace(model_name="Qwen/Qwen3-0.6B", tokens_per_hash=16, dtype="bfloat16")
    settings = S3Settings.resolve(endpoint_url=rgw.http_endpoint,
                                  access_key_id=rgw.access_key, secret_access_key=rgw.secret_key)
    with Uploader(url, ns, settings=settings) as up:
        up.put_blocks({make_offload_key(bytes([i]) * 32, 0): b"r" * BLOCK for i in range(1, 4)}
                      ).raise_for_failures()
    reader = create_user(rgw, "s3kv-gc-reader")
    grant_reader(owner, bucket, PREFIX, reader)
    env = {**os.environ, "S3KV_ENDPOINT_URL": rgw.http_endpoint,
           "S3KV_ACCESS_KEY_ID": reader.access_key, "S3KV_SECRET_ACCESS_KEY": reader.secret_key}

    def s3kv(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "s3kv.cli", *args], capture_output=True,
                              text=True, timeout=120, env=env)

    refused = s3kv("gc", url, "--older-than", "0")
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "gc may not write at" in refused.stderr and "writer policy" in refused.stderr
    assert "Traceback" not in refused.stderr
    listed = owner.list_objects_v2(Bucket=bucket, Prefix=PREFIX)["Contents"]
    assert len([o for o in listed if o["Key"].endswith(".bin")]) == 3  # nothing deleted
