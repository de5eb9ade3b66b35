"""Issue 29, points 4 and 5: quiet failures in cron jobs, and the small frictions.

``--allow-empty`` accepts an existing empty location only; ``bucket/prefix`` without a
scheme gets "did you mean s3://..."; ``verify --deep`` of a directory says what it could
not check and how to compare contents; a flag error names the subcommand and its help;
an ``https://`` URL at an HTTP port names the protocol mismatch; ``demo --keep DIR``.
(Start-up without the library: tests/unit/test_cli_startup.py; gc's progress:
tests/cli/test_day_two_progress.py.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from s3kv.errors import StoreError
from s3kv.naming.location import parse_location
from s3kv.settings import S3Settings
from s3kv.stores import PutOptions, open_store
from tests.cli.day_two import block_key, bucket, cli, namespace, s3, write_tree

pytestmark = pytest.mark.integration
__all__ = ["bucket", "s3"]  # fixtures used by name

EXIT_USAGE, EXIT_NO_MATCH = 2, 7


def test_allow_empty_accepts_an_existing_empty_location_only(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    empty, missing = tmp_path / "empty", tmp_path / "missing"
    empty.mkdir()
    conn = ("--endpoint-url", moto_server)
    for argv in (
        ("ls", str(empty)),
        ("verify", str(empty)),
        ("gc", str(empty), "--older-than", "1d"),
        ("push", str(empty), f"s3://{bucket}/kv", *conn),
        ("ls", f"s3://{bucket}/nothing-yet", *conn),  # a bucket that exists: empty prefix
    ):
        assert cli(capsys, *argv, "--allow-empty").code == 0, argv
    for argv in (
        ("ls", str(missing)),
        ("verify", str(missing)),
        ("gc", str(missing), "--older-than", "1d"),
        ("push", str(missing), f"s3://{bucket}/kv", *conn),
        ("cp", str(missing), str(tmp_path / "copy")),
        ("repair", str(missing), "--dry-run"),
    ):
        result = cli(capsys, *argv, "--allow-empty")
        assert result.code == EXIT_NO_MATCH, (argv, result.err)
        assert f"no namespaces at {missing} (no such directory)" in result.err, result.err
        assert "--allow-empty accepts an existing empty location only" in result.err
    assert not missing.exists() and not (tmp_path / "copy").exists()


def test_a_bucket_and_prefix_without_a_scheme_gets_did_you_mean_s3(
    capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for argv in (
        ("ls", "kv-prod/prod"),
        ("verify", "kv-prod/prod", "--json"),
        ("pull", "kv-prod/prod", str(tmp_path / "dst")),
        ("gc", "kv-prod/prod", "--older-than", "7d"),
    ):
        result = cli(capsys, *argv)
        assert result.code == EXIT_NO_MATCH, argv
        assert "(no such directory) - did you mean s3://kv-prod/prod?" in result.err, result.err
        if "--json" in argv:
            assert result.json["error"]["suggestions"] == ["s3://kv-prod/prod"]
    # A path written as a path is a directory the user meant: no s3:// guess.
    for text in ("./kv-prod/prod", str(tmp_path / "kv-prod" / "prod")):
        result = cli(capsys, "ls", text)
        assert result.code == EXIT_NO_MATCH and "did you mean" not in result.err, result.err
    # An existing directory of that name is a directory, whatever it holds.
    (tmp_path / "kv-prod" / "prod").mkdir(parents=True)
    result = cli(capsys, "ls", "kv-prod/prod")
    assert result.code == EXIT_NO_MATCH and "(nothing under it)" in result.err
    assert "did you mean s3://" not in result.err


def test_verify_deep_of_a_directory_says_what_it_can_and_cannot_check(
    capsys: Any, tmp_path: Path
) -> None:
    root = tmp_path / "kv"
    ns = namespace()
    write_tree(root, ns, 3)
    flipped = root / block_key(ns, 1)
    data = bytearray(flipped.read_bytes())
    data[100] ^= 0xFF  # a flipped byte a directory cannot tell: no checksum recorded
    flipped.write_bytes(bytes(data))
    text = cli(capsys, "verify", str(root), "--deep")
    assert text.code == 0 and "0 findings" in text.out
    assert f"note: {root} is a directory, and a directory records no checksums" in text.out
    assert "a changed byte in a block of the right size passes" in text.out
    assert f"'s3kv repair {root} --from s3://BUCKET/PREFIX --dry-run'" in text.out
    as_json = cli(capsys, "verify", str(root), "--deep", "--json")
    assert "records no checksums" in as_json.json["note"] and "note:" in as_json.err
    shallow = cli(capsys, "verify", str(root), "--json")
    assert shallow.json["note"] is None  # nothing read, nothing to explain


def test_a_flag_error_names_the_subcommand_and_its_help(capsys: Any, tmp_path: Path) -> None:
    for argv, prog in (
        (("push", str(tmp_path), "s3://bkt/kv", "--dryrun"), "s3kv push"),
        (("ls", str(tmp_path), "--bogus"), "s3kv ls"),
        (("gc", str(tmp_path), "--older-than", "xyz"), "s3kv gc"),
        (("verify",), "s3kv verify"),
    ):
        result = cli(capsys, *argv)
        assert result.code == EXIT_USAGE, argv
        line = result.err.strip()
        assert line.startswith(f"{prog}: error: ") and line.endswith(f"(see '{prog} --help')")
    top = cli(capsys, "--bogus")
    assert top.err.startswith("s3kv: error: ") and "(see 's3kv --help')" in top.err


def test_https_at_an_http_port_names_the_protocol_mismatch(
    capsys: Any, moto_server: str, bucket: str, tmp_path: Path
) -> None:
    wrong = moto_server.replace("http://", "https://")
    result = cli(capsys, "ls", f"s3://{bucket}/kv", "--endpoint-url", wrong)
    assert result.code == 5
    assert f"{wrong} answered in plain HTTP, not TLS" in result.err
    assert f"use {moto_server} (or the store's TLS port)" in result.err
    assert "--ca-bundle" not in result.err  # not a certificate problem
    # s3kv's direct data path (blocks of 1 MiB and more) says the same.
    settings = S3Settings.resolve(endpoint_url=wrong, max_attempts=1)
    store = open_store(parse_location(f"s3://{bucket}/kv"), settings)
    try:
        with pytest.raises(StoreError, match="answered in plain HTTP, not TLS"):
            store.put("kv/big.bin", bytes(2 << 20), PutOptions())
    finally:
        store.close()


def test_demo_keep_leaves_the_cache_and_the_pulled_copy(
    capsys: Any, tmp_path: Path, moto_server: str
) -> None:
    kept = tmp_path / "demo"
    result = cli(capsys, "demo", "--blocks", "2", "--bucket", "s3kv-keep-demo",
                 "--endpoint-url", moto_server, "--keep", str(kept), "--json")  # fmt: skip
    assert result.code == 0, result.err
    assert result.json["kept"] == str(kept)
    written, pulled = kept / "vllm-cache", kept / "pulled"
    blocks = sorted(p.relative_to(written) for p in written.rglob("*.bin"))
    assert len(blocks) == 2
    assert blocks == sorted(p.relative_to(pulled) for p in pulled.rglob("*.bin"))
    listed = cli(capsys, "ls", str(written), "--json")
    assert listed.code == 0 and listed.json["blocks"] == 2
    # never among someone's files
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    busy = cli(capsys, "demo", "--blocks", "1", "--keep", str(tmp_path / "busy"))
    assert busy.code == EXIT_USAGE and "not an empty directory" in busy.err
    assert os.listdir(tmp_path / "busy") == ["notes.txt"]
