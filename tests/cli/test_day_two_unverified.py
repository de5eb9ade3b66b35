"""Issue 20, point 7: "unverified" means only what cannot be verified.

A block is unverified when s3kv read it from S3 and it carried no recorded checksum (only
its size could be checked). A directory records none by design: its blocks get their
checksum computed when pushed (and checked by the store on arrival), and are never
counted; commands that read no block (ls, gc, verify without --deep) do not guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.day_two import BLOCK, block_key, bucket, cli, namespace, s3, write_tree

pytestmark = pytest.mark.integration
__all__ = ["bucket", "s3"]  # fixtures used by name


def test_push_from_disk_and_a_directory_report_no_unverified_blocks(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    src = tmp_path / "src"
    write_tree(src, namespace(), 16)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    push = cli(capsys, "push", str(src), url, *conn, "--json")
    assert push.code == 0 and push.json["copied"] == 16
    assert push.json["unverified"] == 0 and push.json["namespaces"][0]["unverified"] == 0
    assert "0 unverified" in cli(capsys, "push", str(src), f"{url}2", *conn).out
    ls = cli(capsys, "ls", str(src))
    assert ls.code == 0 and "unverified" not in ls.out
    deep = cli(capsys, "verify", str(src), "--deep", "--json")
    assert deep.code == 0 and (deep.json["blocks_read"], deep.json["unverified"]) == (16, 0)
    shallow = cli(capsys, "verify", str(src), "--json")
    assert shallow.json["unverified"] is None  # no block read: not known
    assert "unverified" not in cli(capsys, "verify", str(src)).out
    gc = cli(capsys, "gc", str(src), "--older-than", "7d")
    assert gc.code == 0 and "unverified" not in gc.out
    pull = cli(capsys, "pull", url, str(tmp_path / "dst"), *conn, "--json")
    assert pull.json["copied"] == 16 and pull.json["unverified"] == 0  # all recorded


def test_blocks_read_from_s3_without_a_checksum_are_still_counted(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    ns = namespace("obj/tier")
    for i in range(3):  # as vLLM's object-store tier writes: no manifest, no metadata
        s3.put_object(Bucket=bucket, Key=block_key(ns, i, prefix="kv"), Body=b"o" * BLOCK)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    pull = cli(capsys, "pull", url, str(tmp_path / "dst"), *conn, "--allow-missing-manifest",
               "--json")  # fmt: skip
    assert pull.code == 0 and (pull.json["copied"], pull.json["unverified"]) == (3, 3)
    deep = cli(capsys, "verify", url, *conn, "--deep")
    assert "3 unverified" in deep.out
    back = cli(capsys, "push", str(tmp_path / "dst"), f"s3://{bucket}/copy", *conn,
               "--allow-missing-manifest", "--json")  # fmt: skip
    assert back.json["copied"] == 3 and back.json["unverified"] == 0  # from disk: checksummed
