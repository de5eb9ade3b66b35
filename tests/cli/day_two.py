"""Helpers of the day-two tests (issue 20): the CLI in process, small caches, a bucket."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from s3kv.cli import main
from s3kv.naming.keys import KeyMapper, make_offload_key
from s3kv.naming.namespace import Namespace
from s3kv.stores import LocalStore, PutOptions

BLOCK = 4096


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    """``s3kv ARGV`` in this process (a process start per call would cost more)."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse: usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    return Result(code, out, err)


def namespace(model: str = "meta-llama/Llama-3.1-8B-Instruct", **kw: Any) -> Namespace:
    return Namespace(model_name=model, tokens_per_hash=16, dtype="bfloat16", **kw)


def block_hash(i: int, seed: int = 0) -> bytes:
    return (seed * 1_000_000 + i).to_bytes(8, "big") + b"\x5a" * 24


def block_bytes(i: int, seed: int = 0) -> bytes:
    h = block_hash(i, seed)
    return (h * (BLOCK // 32 + 1))[:BLOCK]


def write_tree(root: Path, ns: Namespace, blocks: int, *, seed: int = 0, ranks: int = 1) -> None:
    """A vLLM filesystem-tier tree: config.json, then blocks (temp + rename)."""
    store = LocalStore(root)
    store.put(KeyMapper(ns).config_key(), ns.manifest_bytes(), PutOptions())
    for rank in range(ranks):
        keys = KeyMapper(ns.for_rank(rank))
        for i in range(blocks):
            key = keys.key_for(make_offload_key(block_hash(i, seed), 0))
            store.put(key, block_bytes(i, seed), PutOptions())


def block_key(ns: Namespace, i: int, *, prefix: str = "", seed: int = 0) -> str:
    return KeyMapper(ns, prefix=prefix).key_for(make_offload_key(block_hash(i, seed), 0))


@pytest.fixture
def s3(moto_server: str) -> Iterator[Any]:
    """A plain boto3 client on the session's moto server, to act behind s3kv's back."""
    client = boto3.client(
        "s3",
        endpoint_url=moto_server,
        config=Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )
    yield client
    client.close()


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"s3kv-day2-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def keys_in(client: Any, bucket: str, prefix: str = "") -> list[str]:
    out: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.extend(o["Key"] for o in page.get("Contents", ()))
    return sorted(out)
