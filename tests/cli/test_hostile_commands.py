"""Issue 12 part A as a user meets it: real processes, moto's server on loopback."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from s3kv.naming.keys import KeyMapper
from tests.cli.test_commands import bucket, client, keys_in, namespace, s3kv, write_tree

# Among the slowest tests of the suite, needed at that cost: each runs the command as a
# user does, one process per command (interpreter and imports first), and checks the exit
# code and output. A check of the library's behaviour belongs in tests/functional instead.
pytestmark = pytest.mark.integration
__all__ = ["bucket", "client"]  # fixtures used by name

NESTED = b"[" * 100_000 + b"]" * 100_000


def no_traceback(proc: Any) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr


def test_a_nested_manifest_is_reported_by_every_command_without_a_traceback(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    ns = namespace()
    src = tmp_path / "src"
    write_tree(src, ns, 2)
    (src / KeyMapper(ns).config_key()).write_bytes(NESTED)
    url = f"s3://{bucket}/team/kv"
    conn = ("--endpoint-url", moto_server)

    push = s3kv("push", str(src), url, *conn, "--json")
    no_traceback(push)
    assert push.returncode == 1
    (state,) = json.loads(push.stdout)["namespaces"]
    assert state["manifest"] == "invalid" and "nested deeper" in state["problem"]
    assert keys_in(client, bucket) == []  # neither the manifest nor its blocks went

    # The same tree put behind s3kv's back: every reader refuses it the same way.
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        key = f"team/kv/{path.relative_to(src).as_posix()}"
        client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
    ls = s3kv("ls", url, *conn)
    no_traceback(ls)
    assert ls.returncode == 0 and "manifest unusable" in ls.stdout
    verify = s3kv("verify", url, *conn, "--deep")
    no_traceback(verify)
    assert verify.returncode == 1 and "manifest-invalid" in verify.stdout
    pull = s3kv("pull", url, str(tmp_path / "dst"), *conn)
    no_traceback(pull)
    assert pull.returncode == 1 and "nested deeper" in pull.stdout
    cp = s3kv("cp", url, f"s3://{bucket}/copy", *conn)
    no_traceback(cp)
    assert cp.returncode == 1 and keys_in(client, bucket, "copy/") == []


def test_push_refuses_an_oversized_manifest_instead_of_uploading_it(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    ns = namespace()
    src = tmp_path / "src"
    write_tree(src, ns, 1)
    path = src / KeyMapper(ns).config_key()
    path.write_bytes(path.read_bytes() + b" " * (2 << 20))  # twice the 1 MiB cap
    push = s3kv("push", str(src), f"s3://{bucket}/kv", "--endpoint-url", moto_server)
    no_traceback(push)
    assert push.returncode == 1 and "larger than 1048576 bytes" in push.stdout
    assert keys_in(client, bucket) == []


def test_push_to_a_malformed_s3_url_copies_nothing_locally(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_tree(src, namespace(), 1)
    for target in ("s3:/x", "s3:x", "s3:///x", "s3://bkt//x"):
        push = s3kv("push", str(src), target, cwd=tmp_path)
        no_traceback(push)
        assert push.returncode == 2 and "s3://" in push.stderr, push.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_verify_and_pull_agree_on_a_manifest_at_a_double_slash_key(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    # No real system stores `prefix//folder` (vLLM's obj tier's SDK collapses the `//`):
    # such a key is stray for every command, never read as a manifest.
    folder = namespace().folder
    client.put_object(Bucket=bucket, Key=f"team/kv//{folder}/config.json", Body=b"garbage")
    url, conn = f"s3://{bucket}/team/kv", ("--endpoint-url", moto_server)
    verify = s3kv("verify", url, *conn, "--deep", "--json")
    no_traceback(verify)
    assert verify.returncode == 1
    assert json.loads(verify.stdout)["counts"] == {"stray-key": 1}
    pull = s3kv("pull", url, str(tmp_path / "dst"), *conn, "--json")
    no_traceback(pull)
    assert pull.returncode == 1
    report = json.loads(pull.stdout)
    assert report["stray_keys"] == 1 and report["ok"] is False


def test_pull_fails_when_keys_were_refused(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    for key in ("team/kv/../evil.bin", "team/kv/notes.txt", "team/kv/x\\y"):
        client.put_object(Bucket=bucket, Key=key, Body=b"evil")
    pull = s3kv(
        "pull", f"s3://{bucket}/team/kv", str(tmp_path / "dst"), "--endpoint-url", moto_server
    )
    no_traceback(pull)
    assert pull.returncode == 1
    assert "3 key(s) outside the vLLM layout were refused" in pull.stdout
    assert "3 stray" in pull.stdout
    assert not (tmp_path / "dst").exists() or list((tmp_path / "dst").rglob("*")) == []


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize("command", ["push", "pull"])
def test_an_endpoint_that_never_answers_fails_within_the_timeouts(
    tmp_path: Path, silent_endpoint: str, command: str
) -> None:
    src = tmp_path / "src"
    write_tree(src, namespace(), 1)
    args = (str(src), "s3://bkt/kv") if command == "push" else ("s3://bkt/kv", str(tmp_path / "d"))
    env = {
        **os.environ,
        # short settings: the proof is that they are honoured, not how long they are
        "S3KV_CONNECT_TIMEOUT": "0.3",
        "S3KV_READ_TIMEOUT": "0.3",
        "S3KV_DEADLINE_SECONDS": "0.8",
    }
    started = time.monotonic()
    proc = s3kv(command, *args, "--endpoint-url", silent_endpoint, env=env, timeout=60)
    elapsed = time.monotonic() - started
    no_traceback(proc)
    assert proc.returncode == 5, proc.stderr
    assert silent_endpoint.removeprefix("http://") in proc.stderr
    assert "S3KV_READ_TIMEOUT" in proc.stderr and "AWS_ERROR" not in proc.stderr
    assert elapsed < 45, f"{elapsed:.1f}s"  # includes process start on a loaded machine


def test_flags_that_used_to_crash_exit_2(tmp_path: Path) -> None:
    cases = [
        (("ls", "s3://bkt/kv", "--profile", "nosuchprofile"), "nosuchprofile"),
        (("ls", "s3://bkt/kv", "--endpoint-url", "http://[::1"), "not a valid URL"),
        (
            (
                "gc",
                str(tmp_path),
                "--older-than",
                "1d",
                "--abort-uploads-older-than",
                "99999999999999999999w",
            ),
            "out of range",
        ),
    ]
    for argv, says in cases:
        proc = s3kv(*argv)
        no_traceback(proc)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
