"""Issue 20, point 5: damage found can be fixed.

``pull``/``push``/``cp --checksum`` compare blocks already at the destination by checksum
and replace those that fail their check; a truncated destination block is replaced
without being asked; ``s3kv repair`` replaces damaged blocks from a good copy (local or
S3) and removes unrepairable ones when told, dry run first, counted in the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.day_two import (
    BLOCK,
    block_bytes,
    block_key,
    bucket,
    cli,
    keys_in,
    namespace,
    s3,
    write_tree,
)

pytestmark = pytest.mark.integration
__all__ = ["bucket", "s3"]  # fixtures used by name


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[7] ^= 0xFF
    path.write_bytes(bytes(data))


def tamper(client: Any, bucket: str, key: str, data: bytes) -> None:
    """Overwrite an object behind s3kv's back, keeping its recorded checksum."""
    head = client.head_object(Bucket=bucket, Key=key)
    client.put_object(Bucket=bucket, Key=key, Body=data, Metadata=head["Metadata"])


def no_temp_files(root: Path) -> bool:
    return not [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def test_pull_with_checksum_replaces_a_same_size_corrupt_local_block(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    ns = namespace()
    write_tree(src, ns, 4)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    assert cli(capsys, "push", str(src), url, *conn).code == 0
    assert cli(capsys, "pull", url, str(dst), *conn).code == 0
    victim = dst / block_key(ns, 2)
    flip(victim)

    plain = cli(capsys, "pull", url, str(dst), *conn, "--json")
    assert plain.code == 0 and plain.json["already_present"] == 4  # by size: cannot tell
    dry = cli(capsys, "pull", url, str(dst), *conn, "--checksum", "--dry-run", "--json")
    assert dry.code == 0 and dry.json["would_replace"] == 1
    assert victim.read_bytes() != block_bytes(2)  # a dry run writes nothing
    fixed = cli(capsys, "pull", url, str(dst), *conn, "--checksum", "--json")
    assert fixed.code == 0, fixed.out
    assert (fixed.json["replaced"], fixed.json["already_present"]) == (1, 3)
    assert fixed.json["namespaces"][0]["replaced"] == 1
    assert victim.read_bytes() == block_bytes(2) and no_temp_files(dst)
    again = cli(capsys, "pull", url, str(dst), *conn, "--checksum", "--json")
    assert again.json["replaced"] == 0 and again.json["already_present"] == 4


def test_pull_replaces_a_truncated_local_block(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    ns = namespace()
    write_tree(src, ns, 3)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    assert cli(capsys, "push", str(src), url, *conn).code == 0
    assert cli(capsys, "pull", url, str(dst), *conn).code == 0
    victim = dst / block_key(ns, 1)
    victim.write_bytes(block_bytes(1)[:1000])  # a write that died short
    pull = cli(capsys, "pull", url, str(dst), *conn)
    assert pull.code == 0, pull.out
    assert "1 replaced" in pull.out and "verify" not in pull.out
    assert victim.read_bytes() == block_bytes(1) and no_temp_files(dst)


def test_push_with_checksum_replaces_a_damaged_bucket_block(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    src = tmp_path / "src"
    ns = namespace()
    write_tree(src, ns, 3)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    assert cli(capsys, "push", str(src), url, *conn).code == 0
    key = block_key(ns, 0, prefix="kv")
    tamper(s3, bucket, key, b"\x00" * BLOCK)  # same size, recorded checksum kept
    again = cli(capsys, "push", str(src), url, *conn, "--json")
    assert again.json["already_present"] == 3  # create-only, by size: cannot tell
    fixed = cli(capsys, "push", str(src), url, *conn, "--checksum", "--json")
    assert fixed.code == 0 and fixed.json["replaced"] == 1, fixed.out
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == block_bytes(0)
    assert cli(capsys, "verify", url, *conn, "--deep").code == 0


def test_repair_replaces_a_corrupt_bucket_block_from_a_local_copy_dry_run_first(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    src = tmp_path / "src"
    ns = namespace()
    write_tree(src, ns, 4)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    assert cli(capsys, "push", str(src), url, *conn).code == 0
    corrupt, short = block_key(ns, 1, prefix="kv"), block_key(ns, 3, prefix="kv")
    tamper(s3, bucket, corrupt, b"\xff" * BLOCK)
    s3.put_object(Bucket=bucket, Key=short, Body=b"\x01" * 100)
    untouched = {k: s3.head_object(Bucket=bucket, Key=k)["ETag"] for k in keys_in(s3, bucket)}

    dry = cli(capsys, "repair", url, "--from", str(src), *conn, "--dry-run", "--json")
    assert dry.code == 1  # damage found
    assert (dry.json["checked"], dry.json["damaged"], dry.json["would_replace"]) == (4, 2, 2)
    assert {a["action"] for a in dry.json["actions"]} == {"would-replace"}
    assert {k: s3.head_object(Bucket=bucket, Key=k)["ETag"] for k in keys_in(s3, bucket)} == (
        untouched
    )
    fixed = cli(capsys, "repair", url, "--from", str(src), *conn)
    assert fixed.code == 0, fixed.out
    assert "2 damaged: 2 replaced" in fixed.out
    assert s3.get_object(Bucket=bucket, Key=corrupt)["Body"].read() == block_bytes(1)
    assert s3.get_object(Bucket=bucket, Key=short)["Body"].read() == block_bytes(3)
    good = [k for k in untouched if k not in (corrupt, short)]
    assert all(s3.head_object(Bucket=bucket, Key=k)["ETag"] == untouched[k] for k in good)
    assert cli(capsys, "verify", url, *conn, "--deep").code == 0


def test_repair_removes_unrepairable_blocks_only_when_asked(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    src = tmp_path / "src"
    ns = namespace()
    write_tree(src, ns, 3)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    assert cli(capsys, "push", str(src), url, *conn).code == 0
    key = block_key(ns, 0, prefix="kv")
    tamper(s3, bucket, key, b"\xee" * BLOCK)
    (src / block_key(ns, 0)).unlink()  # no good copy anywhere

    left = cli(capsys, "repair", url, "--from", str(src), *conn, "--json")
    assert left.code == 1 and left.json["unrepairable"] == 1
    assert "no copy at the source" in left.json["actions"][0]["problem"]
    assert key in keys_in(s3, bucket)
    dry = cli(capsys, "repair", url, "--from", str(src), *conn, "--remove-unrepairable",
              "--dry-run", "--json")  # fmt: skip
    assert dry.json["would_remove"] == 1 and key in keys_in(s3, bucket)
    removed = cli(capsys, "repair", url, "--from", str(src), *conn, "--remove-unrepairable")
    assert removed.code == 0 and "1 removed" in removed.out, removed.out
    assert key not in keys_in(s3, bucket)
    assert len([k for k in keys_in(s3, bucket) if k.endswith(".bin")]) == 2
    assert cli(capsys, "verify", url, *conn, "--deep").code == 0


def test_repair_of_a_directory_from_a_bucket(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    ns = namespace()
    write_tree(src, ns, 4)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    assert cli(capsys, "push", str(src), url, *conn).code == 0
    assert cli(capsys, "pull", url, str(dst), *conn).code == 0
    flip(dst / block_key(ns, 0))  # same size: found against the bucket's recorded checksum
    (dst / block_key(ns, 2)).write_bytes(b"")  # empty: never a valid block
    report = cli(capsys, "repair", str(dst), "--from", url, *conn, "--json")
    assert report.code == 0, report.out
    assert (report.json["damaged"], report.json["replaced"]) == (2, 2)
    assert (dst / block_key(ns, 0)).read_bytes() == block_bytes(0)
    assert (dst / block_key(ns, 2)).read_bytes() == block_bytes(2) and no_temp_files(dst)


def test_repair_refuses_a_source_that_holds_nothing(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    src = tmp_path / "src"
    ns = namespace()
    write_tree(src, ns, 2)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    assert cli(capsys, "push", str(src), url, *conn).code == 0
    tamper(s3, bucket, block_key(ns, 0, prefix="kv"), b"\xee" * BLOCK)
    typo = cli(capsys, "repair", url, "--from", str(tmp_path / "scr"), *conn,
               "--remove-unrepairable")  # fmt: skip
    assert typo.code == 7 and f"did you mean {src}?" in typo.err
    assert block_key(ns, 0, prefix="kv") in keys_in(s3, bucket)  # nothing removed
