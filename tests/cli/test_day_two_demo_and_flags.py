"""Issue 20, points 10 and 12: the demo writes only where told; the smaller points.

The demo ignores an endpoint from the environment (and says so); ``key`` without
``--group`` warns and its help shows ``--group``; flags that did nothing are gone;
counts agree with their nouns; a dry run reports no rate; ``--dryrun`` gets a
suggestion.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import s3kv.ops.demo
from tests.cli.day_two import bucket, cli, keys_in, namespace, s3, write_tree

pytestmark = pytest.mark.integration
__all__ = ["bucket", "s3"]  # fixtures used by name


def refused_endpoint() -> str:
    """A loopback port nothing listens on: any request there fails at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_the_demo_ignores_an_endpoint_from_the_environment(
    capsys: Any, monkeypatch: pytest.MonkeyPatch, moto_server: str, s3: Any
) -> None:
    configured = refused_endpoint()
    monkeypatch.setenv("AWS_ENDPOINT_URL", configured)
    for name, value in (("S3KV_DEADLINE_SECONDS", "1"), ("S3KV_CONNECT_TIMEOUT", "1")):
        monkeypatch.setenv(name, value)  # were the demo to go there, it would fail fast
    started: list[str] = []

    @contextmanager
    def embedded() -> Iterator[str]:  # the session's moto server stands in for the demo's
        started.append(moto_server)
        yield moto_server

    monkeypatch.setattr(s3kv.ops.demo, "embedded_s3", embedded)
    result = cli(capsys, "demo", "--blocks", "1", "--bucket", "s3kv-day2-demo", "--json")
    assert result.code == 0, result.err
    assert started and result.json["embedded"] is True
    assert result.json["endpoint"] == moto_server
    assert f"ignoring the configured endpoint {configured}" in result.err
    assert keys_in(s3, "s3kv-day2-demo")  # it wrote to the endpoint it started


def test_the_demo_writes_to_an_endpoint_named_on_its_command_line(
    capsys: Any, monkeypatch: pytest.MonkeyPatch, moto_server: str
) -> None:
    monkeypatch.setattr(s3kv.ops.demo, "embedded_s3", None)  # must not be started
    result = cli(capsys, "demo", "--blocks", "1", "--bucket", "s3kv-day2-named",
                 "--endpoint-url", moto_server, "--json")  # fmt: skip
    assert result.code == 0, result.err
    assert result.json["embedded"] is False and result.json["endpoint"] == moto_server


def test_key_without_group_warns_and_its_help_shows_group(capsys: Any) -> None:
    base = ("key", "--model", "m", "--tokens-per-hash", "16", "--dtype", "bfloat16")
    bare = cli(capsys, *base)
    grouped = cli(capsys, *base, "--group", "16:model.layers.0.self_attn.attn")
    assert bare.code == grouped.code == 0
    assert "no --group given" in bare.err and "matches no real vLLM deployment" in bare.err
    assert grouped.err == ""
    assert bare.out.split()[1] != grouped.out.split()[1]  # another digest
    helped = cli(capsys, "key", "--help")
    assert "--group 16:model.layers.0" in helped.out and "hashed into the digest" in helped.out


def test_flags_that_did_nothing_are_gone(capsys: Any, tmp_path: Path) -> None:
    for argv in (
        ("ls", str(tmp_path), "--concurrency", "4"),
        ("ls", str(tmp_path), "--checksum-algorithm", "sha256"),
        ("verify", str(tmp_path), "--checksum-algorithm", "sha256"),
        ("gc", str(tmp_path), "--older-than", "1d", "--checksum-algorithm", "sha256"),
        ("gc", str(tmp_path), "--older-than", "1d", "--concurrency", "4"),
    ):
        result = cli(capsys, *argv)
        assert result.code == 2 and "unrecognized arguments" in result.err, argv
    old = cli(capsys, "push", str(tmp_path), "s3://bkt/kv", "--checksum", "sha256")
    assert old.code == 2 and "--checksum-algorithm sha256" in old.err
    src = tmp_path / "src"
    write_tree(src, namespace(), 1)
    ok = cli(capsys, "cp", str(src), str(tmp_path / "dst"), "--checksum-algorithm", "sha256")
    assert ok.code == 0, ok.err


def test_counts_agree_with_their_nouns_and_a_dry_run_has_no_rate(
    capsys: Any, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    write_tree(src, namespace(), 1)
    ls = cli(capsys, "ls", str(src))
    assert "ls: 1 namespace, 1 block," in ls.out and "0 stray keys" in ls.out
    dry = cli(capsys, "cp", str(src), str(tmp_path / "dst"), "--dry-run")
    assert "would copy 1 block," in dry.out and "B/s" not in dry.out
    real = cli(capsys, "cp", str(src), str(tmp_path / "dst"))
    assert "copied 1 block," in real.out and "B/s)" in real.out
    gc = cli(capsys, "gc", str(tmp_path / "dst"), "--older-than", "0s")
    assert "(1 block, 0 manifests, 0 stale temp files; 0 uploads aborted)" in gc.out
    assert "1 delete request in" in gc.out
    verify = cli(capsys, "verify", str(src))
    assert "verify: 1 namespace, 1 block; 0 findings" in verify.out


def test_the_aws_cli_spelling_of_a_flag_gets_a_suggestion(capsys: Any, tmp_path: Path) -> None:
    for argv, meant in (
        (("push", str(tmp_path), "s3://bkt/kv", "--dryrun"), "--dry-run"),
        (("gc", str(tmp_path), "--older-than", "1d", "--dryrun"), "--dry-run"),
        (("verify", str(tmp_path), "--allow_empty"), "--allow-empty"),
        (("pulll", "s3://bkt/kv", str(tmp_path)), "'pull'"),
    ):
        result = cli(capsys, *argv)
        assert result.code == 2 and f"did you mean {meant}?" in result.err, (argv, result.err)
        assert len(result.err.strip().splitlines()) == 1
