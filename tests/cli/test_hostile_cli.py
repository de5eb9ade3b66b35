"""Hostile and unlucky inputs through real CLI processes (issue 12 part B): folders that
cannot be made, symlinks planted in DST, blocks without checksum metadata, temp files a
crash left behind, a same-size block with other content."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from s3kv.naming.keys import KeyMapper, make_offload_key
from tests.cli.test_commands import BLOCK, bucket, client, keys_in, namespace, s3kv, write_tree

# Among the slowest tests of the suite, needed at that cost: each runs the command as a
# user does, one process per command (interpreter and imports first), and checks the exit
# code and output. A check of the library's behaviour belongs in tests/functional instead.
pytestmark = pytest.mark.integration
__all__ = ["bucket", "client"]  # fixtures, imported for pytest


def block_key(ns: Any, i: int, *, prefix: str = "team/kv", seed: int = 0) -> str:
    block_hash = (seed * 1_000_000 + i).to_bytes(8, "big") + b"\x5a" * 24
    return KeyMapper(ns, prefix=prefix).key_for(make_offload_key(block_hash, 0))


def no_traceback(result: Any) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr


def test_pull_reports_folders_it_cannot_make_and_copies_the_rest(
    tmp_path: Path, moto_server: str, bucket: str
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    long_ns = namespace("m" * 300)  # its folder name is over 255 bytes: File name too long
    write_tree(src, namespace(), 3)
    write_tree(src, namespace("Qwen/Qwen3-0.6B"), 2, seed=1)
    url = f"s3://{bucket}/team/kv"
    conn = ("--endpoint-url", moto_server)
    assert s3kv("push", str(src), url, *conn).returncode == 0
    # the long namespace goes straight into the bucket (no directory can hold it)
    from s3kv import Uploader
    from s3kv.settings import S3Settings

    with Uploader(url, long_ns, settings=S3Settings.resolve(endpoint_url=moto_server)) as up:
        up.put_blocks({make_offload_key(b"\x01" * 32, 0): b"x" * BLOCK})
    # a file where the Qwen namespace's folder would go: NotADirectoryError
    dst.mkdir()
    qwen_folder = namespace("Qwen/Qwen3-0.6B").folder
    (dst / qwen_folder).write_bytes(b"in the way")

    pull = s3kv("pull", url, str(dst), *conn, "--json")
    no_traceback(pull)
    assert pull.returncode == 1, pull.stderr
    report = json.loads(pull.stdout)
    assert report["copied"] == 3 and report["ok"] is False
    by_folder = {n["folder"]: n for n in report["namespaces"]}
    assert by_folder[long_ns.folder]["manifest"] == "failed"
    assert "too long" in by_folder[long_ns.folder]["problem"]
    assert by_folder[long_ns.folder]["failed"] == 1
    assert by_folder[qwen_folder]["manifest"] == "failed"
    assert "not a directory" in by_folder[qwen_folder]["problem"]
    assert by_folder[qwen_folder]["failed"] == 2
    assert by_folder[namespace().folder]["copied"] == 3

    human = s3kv("pull", url, str(dst), *conn)
    no_traceback(human)
    assert human.returncode == 1 and "too long" in human.stdout


def test_pull_never_follows_a_symlink_planted_inside_dst(
    tmp_path: Path, moto_server: str, bucket: str
) -> None:
    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    ns = namespace()
    write_tree(src, ns, 3, ranks=2)
    url = f"s3://{bucket}/team/kv"
    conn = ("--endpoint-url", moto_server)
    assert s3kv("push", str(src), url, *conn).returncode == 0
    dst.mkdir()
    outside.mkdir()
    (dst / f"{ns.folder}_r0").symlink_to(outside, target_is_directory=True)
    pull = s3kv("pull", url, str(dst), *conn, "--json")
    no_traceback(pull)
    assert list(outside.rglob("*")) == []  # nothing written outside DST's real path
    assert pull.returncode == 1
    report = json.loads(pull.stdout)
    assert report["failed"] == 3 and report["copied"] == 3
    assert all("symlink" in why for why in report["failures"].values())


def test_blocks_without_checksum_metadata_are_size_checked_and_counted(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    ns = namespace()
    write_tree(src, ns, 4)
    url = f"s3://{bucket}/team/kv"
    conn = ("--endpoint-url", moto_server)
    assert s3kv("push", str(src), url, *conn).returncode == 0
    # re-put by another client: no s3kv metadata. An empty one, a flipped byte, a short one.
    good = client.get_object(Bucket=bucket, Key=block_key(ns, 1))["Body"].read()
    flipped = bytes([good[0] ^ 0xFF]) + good[1:]
    client.put_object(Bucket=bucket, Key=block_key(ns, 0), Body=b"")
    client.put_object(Bucket=bucket, Key=block_key(ns, 1), Body=flipped)
    client.put_object(Bucket=bucket, Key=block_key(ns, 2), Body=good[:1000])

    pull = s3kv("pull", url, str(dst), *conn, "--json")
    no_traceback(pull)
    assert pull.returncode == 1
    report = json.loads(pull.stdout)
    assert (report["copied"], report["failed"], report["unverified"]) == (2, 2, 1)
    assert report["ok"] is False
    reasons = " ".join(report["failures"].values())
    assert "0 bytes" in reasons and f"1000 bytes, expected {BLOCK}" in reasons
    assert not (dst / block_key(ns, 0, prefix="")).exists()  # nothing 0-byte lands
    assert (dst / block_key(ns, 1, prefix="")).read_bytes() == flipped
    assert "1 unverified" in s3kv("pull", url, str(tmp_path / "d2"), *conn).stdout

    peer = f"{bucket}-peer"
    client.create_bucket(Bucket=peer)
    cp = s3kv("cp", url, f"s3://{peer}/team/kv", *conn, "--json")
    no_traceback(cp)
    assert json.loads(cp.stdout)["unverified"] == 1 and cp.returncode == 1

    deep = s3kv("verify", url, *conn, "--deep", "--json")
    assert json.loads(deep.stdout)["unverified"] == 3  # the three blocks re-put without one
    assert "3 unverified" in s3kv("verify", url, *conn, "--deep").stdout
    # A directory keeps no checksum by design: its blocks are never "unverified"; ls and gc
    # read no block and cannot tell, verify without --deep neither (null).
    ls = json.loads(s3kv("ls", str(dst), "--json").stdout)
    assert "unverified" not in ls and "unverified" not in ls["namespaces"][0]
    assert json.loads(s3kv("verify", str(dst), "--json").stdout)["unverified"] is None
    assert json.loads(s3kv("verify", str(dst), "--deep", "--json").stdout)["unverified"] == 0
    gc = json.loads(s3kv("gc", str(dst), "--older-than", "300d", "--json").stdout)
    assert "unverified" not in gc


def test_manifestless_namespace_in_a_bucket_is_noted_in_ls(
    moto_server: str, bucket: str, client: Any
) -> None:
    ns = namespace("obj/tier")
    for i in range(3):  # as vLLM's obj tier writes: no manifest, no metadata
        client.put_object(Bucket=bucket, Key=block_key(ns, i), Body=b"o" * BLOCK)
    url = f"s3://{bucket}/team/kv"
    ls = s3kv("ls", url, "--endpoint-url", moto_server, "--json")
    assert json.loads(ls.stdout)["namespaces"][0]["manifest"] == "missing"
    text = s3kv("ls", url, "--endpoint-url", moto_server).stdout
    assert f"{ns.folder}: no manifest" in text and "unverified" not in text  # ls reads no block
    deep = json.loads(s3kv("verify", url, "--endpoint-url", moto_server, "--deep", "--json").stdout)
    assert deep["unverified"] == 3  # read from S3 without a recorded checksum


def test_temp_files_of_an_interrupted_write_are_named_and_collected(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    ns = namespace()
    write_tree(cache, ns, 3)
    block = cache / block_key(ns, 0, prefix="")
    stale = block.with_name(block.name + "_0123456789abcdef.tmp")
    stale.write_bytes(b"half a blo")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    fresh = block.with_name(block.name + "_fedcba9876543210.tmp")
    fresh.write_bytes(b"being written")  # a write in progress: left alone

    verify = s3kv("verify", str(cache), "--json")
    report = json.loads(verify.stdout)
    assert verify.returncode == 1
    kinds = {(f["kind"], f["key"]) for f in report["findings"]}
    rel = stale.relative_to(cache).as_posix()
    assert kinds == {("stale-temp", rel)}
    assert "s3kv gc" in report["findings"][0]["message"]

    push = s3kv("push", str(cache), str(tmp_path / "copy"), "--json")
    assert json.loads(push.stdout)["stray_keys"] == 0  # temp files are no strays

    gc = s3kv("gc", str(cache), "--older-than", "300d", "--json")
    assert gc.returncode == 0, gc.stderr
    assert json.loads(gc.stdout)["temp_files_deleted"] == 1
    assert not stale.exists() and fresh.exists() and block.exists()
    fresh.unlink()
    assert s3kv("verify", str(cache)).returncode == 0


def test_a_same_size_block_with_another_checksum_is_not_already_present(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    src = tmp_path / "src"
    ns = namespace()
    write_tree(src, ns, 3)
    url, peer_url = f"s3://{bucket}/team/kv", f"s3://{bucket}-peer/team/kv"
    client.create_bucket(Bucket=f"{bucket}-peer")
    conn = ("--endpoint-url", moto_server)
    assert s3kv("push", str(src), url, *conn).returncode == 0
    # the peer holds another block of the same size under one key, checksummed by s3kv
    from s3kv import Uploader
    from s3kv.settings import S3Settings

    other = make_offload_key((1).to_bytes(8, "big") + b"\x5a" * 24, 0)
    with Uploader(peer_url, ns, settings=S3Settings.resolve(endpoint_url=moto_server)) as up:
        assert up.put_blocks({other: b"\x00" * BLOCK}).stored == (other,)
    cp = s3kv("cp", url, peer_url, *conn, "--json")
    no_traceback(cp)
    report = json.loads(cp.stdout)
    assert (report["copied"], report["already_present"], report["failed"]) == (2, 0, 1)
    assert "checksum" in next(iter(report["failures"].values()))
    assert cp.returncode == 1
    again = json.loads(s3kv("cp", url, peer_url, *conn, "--json").stdout)
    assert (again["already_present"], again["failed"]) == (2, 1)
    assert len(keys_in(client, f"{bucket}-peer", "team/kv/")) == 4


def test_push_and_verify_fail_what_a_source_holds_that_is_not_a_file_or_folder(
    tmp_path: Path, moto_server: str, bucket: str, client: Any
) -> None:
    """A rank folder symlinked to another disk, a symlinked block and a FIFO named as a
    block: never read nor followed, and never left out unsaid (before, push said "0
    copied" and exited 0, and verify found nothing)."""
    src, elsewhere = tmp_path / "src", tmp_path / "elsewhere"
    ns, other = namespace(), namespace("Qwen/Qwen3-0.6B")
    write_tree(src, ns, 3, ranks=2)
    write_tree(elsewhere, ns, 2, ranks=2, seed=1)
    write_tree(src, other, 2, seed=2)
    linked = f"{ns.folder}_r1"
    for path in sorted((src / linked).rglob("*.bin")):
        path.unlink()
    os.rename(src / linked, tmp_path / "was")
    (src / linked).symlink_to(elsewhere / linked, target_is_directory=True)
    blocks = sorted((src / f"{ns.folder}_r0").rglob("*.bin"))
    target = elsewhere / f"{ns.folder}_r0" / "outside.bin"
    target.write_bytes(b"s" * BLOCK)
    blocks[0].unlink()
    blocks[0].symlink_to(target)
    blocks[1].unlink()
    os.mkfifo(blocks[1])
    url = f"s3://{bucket}/team/kv"
    conn = ("--endpoint-url", moto_server)

    push = s3kv("push", str(src), url, *conn, "--json")
    no_traceback(push)
    assert push.returncode == 1, push.stderr
    report = json.loads(push.stdout)
    assert report["ok"] is False and report["failed"] == 3 and report["copied"] == 3
    why = report["failures"]
    assert "symbolic link" in why[linked] and "not followed" in why[linked]
    assert "symbolic link" in why[blocks[0].relative_to(src).as_posix()]
    assert "FIFO" in why[blocks[1].relative_to(src).as_posix()]
    stored = keys_in(client, bucket)
    assert not [k for k in stored if f"/{linked}/" in k]  # nothing behind the link was sent
    assert len([k for k in stored if k.endswith(".bin")]) == 3  # the regular blocks were

    # another namespace asked for: what is passed over in this one is not its failure
    only = s3kv("push", str(src), url, *conn, "--namespace", other.folder, "--json")
    assert only.returncode == 0, only.stdout + only.stderr

    human = s3kv("push", str(src), url, *conn)
    no_traceback(human)
    assert human.returncode == 1 and "is a FIFO: not read and not followed" in human.stdout

    verify = s3kv("verify", str(src), "--json")
    no_traceback(verify)
    assert verify.returncode == 1
    assert json.loads(verify.stdout)["counts"]["not-a-file"] == 3

    listed = json.loads(s3kv("ls", str(src), "--json").stdout)
    assert len(listed["not_files"]) == 3 and "is a FIFO" in " ".join(listed["not_files"])

    # a source holding nothing but a link says so, not just "no namespaces"
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    (lonely / linked).symlink_to(elsewhere / linked, target_is_directory=True)
    nothing = s3kv("push", str(lonely), url, *conn)
    no_traceback(nothing)
    assert nothing.returncode == 7 and "is a symbolic link" in nothing.stderr


def test_pull_fails_a_block_whose_place_a_folder_holds_never_counts_it_present(
    tmp_path: Path, moto_server: str, bucket: str
) -> None:
    """A folder named as a block file in DST: pull said "1 already present", exit 0, and
    the block was not there."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, namespace(), 3)
    url = f"s3://{bucket}/team/kv"
    conn = ("--endpoint-url", moto_server)
    assert s3kv("push", str(src), url, *conn).returncode == 0
    first = sorted(p.relative_to(src) for p in src.rglob("*.bin"))[0]
    (dst / first).mkdir(parents=True)
    pull = s3kv("pull", url, str(dst), *conn, "--json")
    no_traceback(pull)
    assert pull.returncode == 1, pull.stdout
    report = json.loads(pull.stdout)
    assert (report["copied"], report["already_present"], report["failed"]) == (2, 0, 1)
    assert "a folder is in the way of the file" in report["failures"][first.as_posix()]
    assert (dst / first).is_dir() and not list((dst / first).iterdir())
    assert not list(dst.rglob("*.tmp"))
