"""The command line as a user runs it: real processes, real flags, a moto server on loopback."""

from __future__ import annotations

import filecmp
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from s3kv.naming.keys import KeyMapper, make_offload_key
from s3kv.naming.namespace import Namespace
from s3kv.stores import LocalStore, PutOptions
from tests.faults.proxy import FaultProxy, slow_puts

# Among the slowest tests of the suite, needed at that cost: each runs the command as a
# user does, one process per command (interpreter and imports first), and checks the exit
# code and output. A check of the library's behaviour belongs in tests/functional instead.
pytestmark = pytest.mark.integration

BLOCK = 4096


def s3kv(*args: str, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "s3kv.cli", *args],
        capture_output=True, text=True, timeout=timeout, **kw,
    )


def namespace(model: str = "meta-llama/Llama-3.1-8B-Instruct", **kw: Any) -> Namespace:
    return Namespace(model_name=model, tokens_per_hash=16, dtype="bfloat16", **kw)


def write_tree(root: Path, ns: Namespace, blocks: int, *, seed: int = 0, ranks: int = 1) -> None:
    """A vLLM filesystem-tier tree: config.json, then blocks (temp + rename)."""
    store = LocalStore(root)
    store.put(KeyMapper(ns).config_key(), ns.manifest_bytes(), PutOptions())
    for rank in range(ranks):
        keys = KeyMapper(ns.for_rank(rank))
        for i in range(blocks):
            block_hash = (seed * 1_000_000 + i).to_bytes(8, "big") + b"\x5a" * 24
            data = (block_hash * (BLOCK // 32 + 1))[:BLOCK]
            store.put(keys.key_for(make_offload_key(block_hash, 0)), data, PutOptions())


@pytest.fixture
def client(moto_server: str) -> Any:
    return boto3.client("s3", endpoint_url=moto_server, config=Config(
        s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
        response_checksum_validation="when_required"))


@pytest.fixture
def bucket(client: Any) -> str:
    name = f"s3kv-cli-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return name


def keys_in(client: Any, bucket: str, prefix: str = "") -> list[str]:
    out: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.extend(o["Key"] for o in page.get("Contents", ()))
    return out


def trees_identical(a: Path, b: Path) -> bool:
    names_a = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    names_b = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    assert names_a == names_b
    match, mismatch, errors = filecmp.cmpfiles(a, b, names_a, shallow=False)
    return not mismatch and not errors and len(match) == len(names_a)


def test_push_then_pull_gives_a_byte_identical_tree(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, namespace(), 20, ranks=2)
    write_tree(src, namespace("Qwen/Qwen3-0.6B"), 5, seed=1)
    url = f"s3://{bucket}/team/kv"
    push = s3kv("push", str(src), url, "--endpoint-url", moto_server, "--json")
    assert push.returncode == 0, push.stderr
    report = json.loads(push.stdout)
    assert (report["copied"], report["failed"], report["stray_keys"]) == (45, 0, 0)
    assert "push: copied 45 blocks" in push.stderr  # the one-line summary
    again = s3kv("push", str(src), url, "--endpoint-url", moto_server, "--json")
    assert json.loads(again.stdout)["copied"] == 0
    assert json.loads(again.stdout)["already_present"] == 45
    pull = s3kv("pull", url, str(dst), "--endpoint-url", moto_server)
    assert pull.returncode == 0, pull.stderr
    assert "pull: copied 45 blocks" in pull.stdout
    assert trees_identical(src, dst)  # config.json bytes included

    ls = s3kv("ls", url, "--endpoint-url", moto_server, "--json")
    assert ls.returncode == 0, ls.stderr
    rows = {r["model"]: r for r in json.loads(ls.stdout)["namespaces"]}
    llama = rows["meta-llama/Llama-3.1-8B-Instruct"]
    assert (llama["ranks"], llama["blocks"], llama["bytes"], llama["manifest"]) == (
        [0, 1], 40, 40 * BLOCK, "present")
    assert llama["dtype"] == "bfloat16" and llama["tp_size"] == 1
    assert llama["oldest"] and llama["newest"]
    assert rows["Qwen/Qwen3-0.6B"]["blocks"] == 5
    clean = s3kv("verify", url, "--endpoint-url", moto_server, "--deep")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "0 findings" in clean.stdout

    peer = f"{bucket}-peer"
    client.create_bucket(Bucket=peer)
    copy = s3kv("cp", url, f"s3://{peer}/team/kv", "--endpoint-url", moto_server, "--json")
    assert copy.returncode == 0, copy.stderr
    assert json.loads(copy.stdout)["server_side"] is True
    assert len(keys_in(client, peer, "team/kv/")) == 47


def test_an_interrupted_push_resumes_sending_only_the_missing_blocks(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    src = tmp_path / "src"
    total = 400
    write_tree(src, namespace(), total)
    url = f"s3://{bucket}/team/kv"
    with FaultProxy(moto_server, slow_puts, delay=0.02) as proxy:  # 400 PUTs: at least 8 s
        proc = subprocess.Popen(
            [sys.executable, "-m", "s3kv.cli", "push", str(src), url, "--endpoint-url",
             proxy.url, "--concurrency", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while len(keys_in(client, bucket, "team/kv/")) < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def listed() -> list[str]:
        return [k for k in keys_in(client, bucket, "team/kv/") if k.endswith(".bin")]

    # a PUT the proxy had read in full before the kill may still reach the store: count
    # once the listing holds still
    stored, previous = listed(), None
    while stored != previous:
        time.sleep(0.3)
        stored, previous = listed(), stored
    assert 0 < len(stored) < total, "the push was not interrupted midway"
    resumed = s3kv("push", str(src), url, "--endpoint-url", moto_server, "--json")
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["copied"] == total - len(stored)
    assert report["already_present"] == len(stored)
    assert len([k for k in keys_in(client, bucket, "team/kv/") if k.endswith(".bin")]) == total


EVIL_KEYS = [
    "team/kv/../../evil/x_0123456789ab_r0/abc/de_g0/abcdef.bin",
    "team/kv/../x_0123456789ab/config.json",
    "team/kv//etc/passwd",
    "team/kv/./x_0123456789ab_r0/abc/de_g0/abcdef.bin",
    "team/kv/x_0123456789ab_r0/abc/de_g0/../../../../../evil.bin",
    "team/kv/x_0123456789ab_r0/abc/de_g0/abcdef.bin/../../../../../../tmp/evil",
]


def test_pull_refuses_keys_that_would_escape_the_destination(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    src, dst = tmp_path / "src", tmp_path / "area" / "dst"
    write_tree(src, namespace(), 3)
    url = f"s3://{bucket}/team/kv"
    assert s3kv("push", str(src), url, "--endpoint-url", moto_server).returncode == 0
    for key in EVIL_KEYS:
        client.put_object(Bucket=bucket, Key=key, Body=b"evil")
    pull = s3kv("pull", url, str(dst), "--endpoint-url", moto_server, "--json")
    report = json.loads(pull.stdout)
    assert report["copied"] == 3
    assert report["stray_keys"] == len(EVIL_KEYS)
    assert sorted(report["stray_examples"]) == sorted(EVIL_KEYS)
    outside = [p for p in (tmp_path / "area").rglob("*") if not p.is_relative_to(dst)]
    assert outside == []
    assert not any("evil" in p.as_posix() or p.name == "passwd" for p in tmp_path.rglob("*"))
    assert trees_identical(src, dst)


def test_gc_by_age_and_by_budget_keeps_manifests_of_live_namespaces(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    src = tmp_path / "src"
    write_tree(src, namespace(), 30)
    write_tree(src, namespace("Qwen/Qwen3-0.6B"), 10, seed=1)
    url = f"s3://{bucket}/team/kv"
    assert s3kv("push", str(src), url, "--endpoint-url", moto_server).returncode == 0
    conn = ("--endpoint-url", moto_server)

    young = s3kv("gc", url, "--older-than", "1h", *conn, "--json")
    assert young.returncode == 0, young.stderr
    assert json.loads(young.stdout)["blocks_deleted"] == 0

    budget = s3kv("gc", url, "--max-bytes", f"{25 * BLOCK}", *conn, "--json")
    assert budget.returncode == 0, budget.stderr
    report = json.loads(budget.stdout)
    assert report["blocks_deleted"] == 15 and report["bytes_kept"] == 25 * BLOCK
    remaining = keys_in(client, bucket, "team/kv/")
    assert len([k for k in remaining if k.endswith(".bin")]) == 25
    assert len([k for k in remaining if k.endswith("config.json")]) == 2

    later = (datetime.now(timezone.utc) + timedelta(hours=3)).isoformat()
    dry = s3kv("gc", url, "--older-than", "2h", "--now", later, "--dry-run", *conn, "--json")
    assert json.loads(dry.stdout)["would_delete_blocks"] == 25
    assert len(keys_in(client, bucket, "team/kv/")) == 27
    old = s3kv("gc", url, "--older-than", "2h", "--now", later, *conn)
    assert old.returncode == 0, old.stderr
    assert "gc: freed" in old.stdout
    # No block left, but manifests stay unless asked for.
    assert sorted(keys_in(client, bucket, "team/kv/")) == sorted(
        k for k in remaining if k.endswith("config.json"))
    empty = s3kv("gc", url, "--older-than", "2h", "--delete-empty-manifests", *conn, "--json")
    assert json.loads(empty.stdout)["manifests_deleted"] == 2
    assert keys_in(client, bucket, "team/kv/") == []


def test_verify_finds_a_corrupt_block_an_orphan_and_a_mismatched_manifest(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    src = tmp_path / "src"
    ns = namespace()
    write_tree(src, ns, 10)
    url = f"s3://{bucket}/team/kv"
    assert s3kv("push", str(src), url, "--endpoint-url", moto_server).returncode == 0
    keys = KeyMapper(ns, prefix="team/kv")
    victim = keys.key_for(make_offload_key((3).to_bytes(8, "big") + b"\x5a" * 24, 0))
    head = client.head_object(Bucket=bucket, Key=victim)
    client.put_object(Bucket=bucket, Key=victim, Body=b"\xff" * BLOCK, Metadata=head["Metadata"])
    short = keys.key_for(make_offload_key((4).to_bytes(8, "big") + b"\x5a" * 24, 0))
    client.put_object(Bucket=bucket, Key=short, Body=b"\x00" * 100)
    orphan = KeyMapper(namespace("orphan/model"), prefix="team/kv").key_for(
        make_offload_key(b"\x01" * 32, 0))
    client.put_object(Bucket=bucket, Key=orphan, Body=b"\x01" * BLOCK)
    liar = namespace("liar/model")
    fake = namespace("liar/model", tp_size=2).manifest_bytes()
    client.put_object(Bucket=bucket, Key=KeyMapper(liar, prefix="team/kv").config_key(), Body=fake)
    client.put_object(Bucket=bucket, Key="team/kv/notes.txt", Body=b"hello")

    shallow = s3kv("verify", url, "--endpoint-url", moto_server, "--json")
    assert shallow.returncode == 1
    kinds = {(f["kind"], f["key"]) for f in json.loads(shallow.stdout)["findings"]}
    assert ("size-mismatch", short) in kinds
    assert ("orphan", orphan.rsplit("_r0/", 1)[0]) in kinds
    assert ("manifest-mismatch", KeyMapper(liar, prefix="team/kv").config_key()) in kinds
    assert ("stray-key", "team/kv/notes.txt") in kinds
    assert not any(kind == "checksum-mismatch" for kind, _ in kinds)  # same size: deep only

    deep = s3kv("verify", url, "--endpoint-url", moto_server, "--deep")
    assert deep.returncode == 1
    assert f"checksum-mismatch: {victim!r}" in deep.stdout
    assert "5 findings" in deep.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["push", sys.executable, "s3://bucket/kv"],  # a file, not a directory
        ["pull", "s3://b/kv", "/tmp/x"],  # bucket name too short
        ["gc", "s3://bucket/kv", "--max-bytes", "lots"],
        ["gc", "s3://bucket/kv"],
        ["ls", "ftp://bucket/kv"],
        ["push", "/tmp"],
        ["verify", "s3://bucket/kv", "--concurrency", "0"],
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args: list[str]) -> None:
    result = s3kv(*args, env={**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "error" in lines[0]


@pytest.mark.parametrize("command", ["pull", "push", "ls"])
def test_a_trace_file_that_cannot_be_written_is_one_line_naming_it(
    tmp_path: Path, command: str
) -> None:
    """S3KV_TRACE_FILE naming a folder (or a file in a missing one): the first request
    is refused before it is sent, one line names the variable and the fix, exit 2, and
    the destination is untouched (the request a trace misses is never sent)."""
    from bench.lib.bulk_tree import write_cache

    write_cache(tmp_path / "src", 4096, 2, 7, "s3kv")
    args = {"pull": ["s3://bucket/kv", str(tmp_path / "out")],
            "push": [str(tmp_path / "src"), "s3://bucket/kv"],
            "ls": ["s3://bucket/kv"]}[command]
    for trace in (tmp_path, tmp_path / "missing" / "trace.jsonl"):
        env = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
               "S3KV_TRACE_FILE": str(trace), "AWS_ACCESS_KEY_ID": "k",
               "AWS_SECRET_ACCESS_KEY": "s"}
        result = s3kv(command, *args, env=env)
        assert result.returncode == 2, result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert f"S3KV_TRACE_FILE={trace}: cannot append to it" in lines[0]
        assert "unset S3KV_TRACE_FILE" in lines[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "missing").exists()


def test_debug_shows_the_traceback() -> None:
    result = s3kv("gc", "s3://bucket/kv", "--debug")
    assert result.returncode == 2 and "Traceback" in result.stderr


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_ENDPOINT", "S3KV_E"))}
    env["S3KV_TRACE_FILE"] = str(tmp_path / "demo-trace.jsonl")  # another endpoint
    result = s3kv("demo", "--blocks", "4", env=env, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "byte-identical" in result.stdout
    assert "demo: OK" in result.stdout
    assert "stopped the embedded S3 endpoint" in result.stdout
