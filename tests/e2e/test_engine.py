"""One engine stores a prompt's KV in S3; a fresh engine, in another process, reuses it.

Each engine life is its own process (tests/e2e/engine.py), so nothing but S3 carries the
cache from one to the next. Greedy decoding on a random-weight model: identical tokens
show the loaded KV is the KV that was computed; ``num_cached_tokens`` and the requests
s3kv traced (``S3KV_TRACE_FILE``) show where it came from.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Endpoint
from tests.e2e.engine import engine_env, run_engine

PROMPT_TOKENS = 1024
CHUNK_TOKENS = 128  # kv_connector_extra_config block_size: one S3 object per 128 tokens
BLOCKS = PROMPT_TOKENS // CHUNK_TOKENS
MAX_TOKENS = 8
LAYOUTS = ["in-process", "multiprocess"]
MMAP_LEAK = "Failed to close mmap_obj"  # vLLM's log line when a tier kept a view

# Each engine life is a process that imports vLLM and torch: about a minute on an idle
# 2-core machine, several when it is shared.
pytestmark = pytest.mark.timeout(3600)


def _prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 4096) for _ in range(PROMPT_TOKENS)]


def _engine(model: Path, tier: dict[str, Any] | None, prompt: list[int], tmp: Path, *,
            layout: str) -> dict[str, Any]:
    """One engine life with ``tier`` as its only secondary tier; its first result."""
    tmp.mkdir(parents=True, exist_ok=True)
    trace = tmp / "trace.jsonl"
    env = engine_env(tmp, multiprocess=layout == "multiprocess",
                     extra={"S3KV_TRACE_FILE": str(trace)})
    job = {"model": str(model), "prompts": [prompt], "max_tokens": MAX_TOKENS,
           "block_size": CHUNK_TOKENS, "secondary_tiers": [tier] if tier else [],
           "settle_seconds": 2.0}
    out = run_engine(job, env=env)
    (result,) = out["results"]
    result["log"] = out["log"]
    result["trace"] = ([json.loads(ln) for ln in trace.read_text().splitlines()]
                       if trace.exists() else [])
    return result


def _block_keys(endpoint: Endpoint, bucket: str, prefix: str) -> list[str]:
    listed = endpoint.client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in listed.get("Contents", ()) if o["Key"].endswith(".bin"))


def _requests(result: dict[str, Any], op: str) -> list[str]:
    return [r["key"] for r in result["trace"] if r["op"] == op and r["key"].endswith(".bin")]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_fresh_engine_reuses_the_kv_another_stored(
    endpoint: Endpoint, tiny_model: Path, tmp_path: Path, layout: str
) -> None:
    bucket = endpoint.bucket()
    tier = endpoint.tier(bucket, "kv")
    prompt = _prompt(1)

    a = _engine(tiny_model, tier, prompt, tmp_path / "a", layout=layout)
    assert a["num_cached_tokens"] == 0
    blocks = _block_keys(endpoint, bucket, "kv/")
    assert len(blocks) == BLOCKS, blocks
    assert sorted(_requests(a, "PutObject")) == blocks
    body = endpoint.client.get_object(Bucket=bucket, Key=blocks[0])["Body"].read()
    assert any(body), "the engine stored an all-zero block: the copy never reached S3"

    b = _engine(tiny_model, tier, prompt, tmp_path / "b", layout=layout)
    assert b["tokens"] == a["tokens"]
    assert b["num_cached_tokens"] == PROMPT_TOKENS
    # One HEAD (the lookup) and one GET (the load) per block, for exactly those blocks.
    assert sorted(_requests(b, "HeadObject")) == blocks
    assert sorted(_requests(b, "GetObject")) == blocks
    assert _requests(b, "PutObject") == []  # found in S3, so nothing to store again
    for run in (a, b):
        assert MMAP_LEAK not in run["log"]
    if layout != "in-process" or endpoint.name != "moto-server":
        return  # the controls below test the engine's use of the tier: one place is enough

    # Control: the same prompt under a prefix with nothing in it is computed afresh.
    empty = _engine(tiny_model, endpoint.tier(bucket, "elsewhere"), prompt, tmp_path / "c",
                    layout=layout)
    assert empty["num_cached_tokens"] == 0
    assert empty["tokens"] == a["tokens"]
    assert _requests(empty, "GetObject") == []

    # Control: damage one stored object (same size, same metadata, so only s3kv's
    # checksum can tell). Which block it holds is a hash away: vLLM uses the blocks
    # before it and recomputes from it on, and the output stays the same.
    damaged = _requests(a, "PutObject")[3]
    head = endpoint.client.head_object(Bucket=bucket, Key=damaged)
    garbage = random.Random(4).randbytes(head["ContentLength"])
    endpoint.client.put_object(Bucket=bucket, Key=damaged, Body=garbage,
                               Metadata=head.get("Metadata", {}))
    d = _engine(tiny_model, tier, prompt, tmp_path / "d", layout=layout)
    assert d["tokens"] == a["tokens"]
    assert damaged in _requests(d, "GetObject")
    assert d["num_cached_tokens"] % CHUNK_TOKENS == 0
    assert d["num_cached_tokens"] < PROMPT_TOKENS
    (warning,) = [ln for ln in d["log"].splitlines() if "s3kv tier: load job" in ln]
    assert "1 of" in warning and "blocks failed" in warning
    assert damaged.rsplit("/", 1)[1].removesuffix(".bin") in warning
