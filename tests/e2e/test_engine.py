"""One engine stores a prompt's KV in S3; a fresh engine, in another process, reuses it.

Each engine life is its own process (tests/e2e/engine.py), so nothing but S3 carries the
cache from one to the next. Greedy decoding on a random-weight model: identical tokens
show the loaded KV is the KV that was computed; ``num_cached_tokens`` and the requests
s3kv traced (``S3KV_TRACE_FILE``) show where it came from.

Four engine lives on Ceph RGW, each paid for by what it proves (an engine life is the
slowest step of the suite): A stores as tenant ``acme`` (in-process), B reuses all of it
(vLLM's multiprocess layout, the engine core in a process of its own), C is the control
of two tenants: the same tokens, as tenant ``globex`` (named by the request's
``kv_transfer_params``), are computed afresh and stored under globex's own prefix
(multiprocess), D meets a damaged object (in-process), heals it with its recompute's
store and then loads it. So each layout both stores and loads, and every life is checked
for the mmap leak. docs/e2e.md maps them to what the earlier ten lives proved. A fifth
life, tests/e2e/test_bad_day.py, meets a store's bad day.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ARTIFACTS
from tests.e2e.conftest import Endpoint
from tests.e2e.engine import Session, engine_env, run_engine

PROMPT_TOKENS = 1024
CHUNK_TOKENS = 128  # kv_connector_extra_config block_size: one S3 object per 128 tokens
BLOCKS = PROMPT_TOKENS // CHUNK_TOKENS
MAX_TOKENS = 8
MMAP_LEAK = "Failed to close mmap_obj"  # vLLM's log line when a tier kept a view
ACME = "kv/tenants/acme/"  # where engine A's requests (tenant acme) keep their KV

# Each engine life is a process that imports vLLM and torch: the slowest tests of all,
# needed at that cost (the only proof with a real engine); four lives, no more.
pytestmark = pytest.mark.timeout(3600)


def _prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 4096) for _ in range(PROMPT_TOKENS)]


def _engine(model: Path, tier: dict[str, Any] | None, prompt: list[int], tmp: Path, *,
            layout: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """One engine life with ``tier`` as its only secondary tier; its first result.
    ``params``: the request's ``kv_transfer_params``."""
    tmp.mkdir(parents=True, exist_ok=True)
    trace = tmp / "trace.jsonl"
    env = engine_env(tmp, multiprocess=layout == "multiprocess",
                     extra={"S3KV_TRACE_FILE": str(trace)})
    job = {"model": str(model), "prompts": [prompt], "max_tokens": MAX_TOKENS,
           "block_size": CHUNK_TOKENS, "secondary_tiers": [tier] if tier else [],
           "settle_seconds": 2.0, "kv_transfer_params": params}
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


@dataclass(frozen=True)
class Stored:
    """Engine A's life: the bucket and prefix it stored the prompt under, and its run."""

    bucket: str
    tier: dict[str, Any]
    prompt: list[int]
    blocks: list[str]
    run: dict[str, Any]


@pytest.fixture(scope="module")
def stored(endpoint: Endpoint, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory,
           ) -> Stored:
    bucket = endpoint.bucket()
    # requests naming no tenant are acme's: its KV lives under kv/tenants/acme/
    tier = {**endpoint.tier(bucket, "kv"), "default_tenant": "acme"}
    prompt = _prompt(1)
    # in-process: its PUTs are traced in chain order, which the damaged-object control uses
    a = _engine(tiny_model, tier, prompt, tmp_path_factory.mktemp("a"), layout="in-process")
    return Stored(bucket, tier, prompt, _block_keys(endpoint, bucket, "kv/"), a)


def test_engine_a_stores_exactly_the_prompts_blocks(endpoint: Endpoint, stored: Stored) -> None:
    a = stored.run
    assert a["num_cached_tokens"] == 0
    assert len(stored.blocks) == BLOCKS, stored.blocks
    assert all(k.startswith(ACME) for k in stored.blocks)
    assert sorted(_requests(a, "PutObject")) == stored.blocks
    body = endpoint.client.get_object(Bucket=stored.bucket, Key=stored.blocks[0])["Body"].read()
    assert any(body), "the engine stored an all-zero block: the copy never reached S3"
    assert MMAP_LEAK not in a["log"]


def test_a_fresh_engine_reuses_the_kv_another_stored(
    stored: Stored, tiny_model: Path, tmp_path: Path
) -> None:
    b = _engine(tiny_model, stored.tier, stored.prompt, tmp_path, layout="multiprocess")
    assert b["tokens"] == stored.run["tokens"]
    assert b["num_cached_tokens"] == PROMPT_TOKENS
    # One look (the lookup: a GET of one byte, or a HEAD) and one GET (the load) per
    # block, for exactly those blocks.
    looks_and_loads = _requests(b, "HeadObject") + _requests(b, "GetObject")
    assert sorted(looks_and_loads) == sorted(stored.blocks * 2)
    assert _requests(b, "PutObject") == []  # found in S3, so nothing to store again
    assert MMAP_LEAK not in b["log"]


def test_control_another_tenants_identical_tokens_are_computed_afresh(
    endpoint: Endpoint, stored: Stored, tiny_model: Path, tmp_path: Path
) -> None:
    # The same location and tier as A's, the same tokens (so the same block hashes: no
    # cache_salt), but the request names tenant globex: none of acme's KV may reach it.
    c = _engine(tiny_model, stored.tier, stored.prompt, tmp_path, layout="multiprocess",
                params={"s3kv_tenant": "globex"})
    assert c["num_cached_tokens"] == 0
    assert c["tokens"] == stored.run["tokens"]
    # nothing loaded: a look at each block at most (a GET of one byte, or a HEAD)
    looks = Counter(_requests(c, "GetObject") + _requests(c, "HeadObject"))
    assert max(looks.values(), default=0) <= 1
    # no request to any of acme's blocks (its manifest is read at start: the default tenant)
    touched = [r["key"] for r in c["trace"] if r.get("key", "").endswith(".bin")]
    assert touched and not any(k.startswith(ACME) for k in touched)
    # it stores the same blocks under its own prefix (the multiprocess layout's store)
    globex = _block_keys(endpoint, stored.bucket, "kv/tenants/globex/")
    assert sorted(_requests(c, "PutObject")) == globex
    assert [k.removeprefix("kv/tenants/globex/") for k in globex] == [
        k.removeprefix(ACME) for k in stored.blocks]
    assert _block_keys(endpoint, stored.bucket, ACME) == stored.blocks  # acme's untouched
    assert MMAP_LEAK not in c["log"]


def test_control_a_damaged_object_is_rejected_and_recomputed(
    endpoint: Endpoint, stored: Stored, tiny_model: Path, tmp_path: Path
) -> None:
    # A copy of A's cache under another prefix (keys are prefix + layout), so this test
    # leaves A's objects as they were. One object is overwritten with random bytes of the
    # same size and the same metadata: only s3kv's checksum can tell. Which block it
    # holds is a hash away: vLLM uses the blocks before it and recomputes from it on.
    client, bucket = endpoint.client, stored.bucket
    for key in client.list_objects_v2(Bucket=bucket, Prefix=ACME)["Contents"]:
        client.copy_object(Bucket=bucket, Key="damaged/" + key["Key"].split("/", 1)[1],
                           CopySource={"Bucket": bucket, "Key": key["Key"]})
    damaged = "damaged/" + _requests(stored.run, "PutObject")[3].split("/", 1)[1]
    head = client.head_object(Bucket=bucket, Key=damaged)
    garbage = random.Random(4).randbytes(head["ContentLength"])
    client.put_object(Bucket=bucket, Key=damaged, Body=garbage, Metadata=head["Metadata"])

    tier = {**endpoint.tier(bucket, "damaged"), "default_tenant": "acme"}
    tmp_path.mkdir(parents=True, exist_ok=True)
    trace = tmp_path / "trace.jsonl"
    env = engine_env(tmp_path, multiprocess=False, extra={"S3KV_TRACE_FILE": str(trace)})
    job = {"model": str(tiny_model), "max_tokens": MAX_TOKENS, "block_size": CHUNK_TOKENS,
           "secondary_tiers": [tier]}
    with Session(job, env=env, log_path=tmp_path / "engine.log") as session:
        (d,) = session.step([stored.prompt], settle=2.0)["results"]  # its stores land
        # vLLM stored the recompute; a fresh look from S3 (prefix caches emptied)
        (again,) = session.step([stored.prompt], reset=True)["results"]
        log = session.close()
    (ARTIFACTS / "e2e-damaged.log").write_text(log + "\n" + trace.read_text())
    requests = [json.loads(ln) for ln in trace.read_text().splitlines()]
    gets = [r["key"] for r in requests if r["op"] == "GetObject"]
    assert d["tokens"] == stored.run["tokens"]
    assert damaged in gets
    assert d["num_cached_tokens"] % CHUNK_TOKENS == 0
    assert d["num_cached_tokens"] < PROMPT_TOKENS  # the blocks before it, if any, loaded
    (warning,) = [ln for ln in log.splitlines() if "s3kv tier: load job" in ln]
    assert "1 of" in warning and "blocks failed" in warning
    assert damaged.rsplit("/", 1)[1].removesuffix(".bin") in warning
    # healed (issue 40): the recompute's store replaced the damaged copy, and only it (its
    # bytes are the recompute's, which need not be A's to the bit: computed over loaded KV)
    assert client.get_object(Bucket=bucket, Key=damaged)["Body"].read() != garbage
    puts = [r["key"] for r in requests if r["op"] == "PutObject" and r["key"].endswith(".bin")]
    assert puts == [damaged]
    # the hit after that loads every block
    assert again["num_cached_tokens"] == PROMPT_TOKENS
    assert again["tokens"] == stored.run["tokens"]
    assert MMAP_LEAK not in log
