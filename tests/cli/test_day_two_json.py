"""Issue 20, point 8: one documented JSON schema per command's --json.

Every command's document is checked against its committed schema (s3kv/cli/schemas/);
timestamps are RFC 3339 UTC that jq's fromdateiso8601 reads; one name and type per
meaning across commands; dry runs say would_*; errors are JSON on stdout too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from s3kv.cli.jsondoc import SCHEMAS, schema
from tests.cli.day_two import BLOCK, block_key, bucket, cli, namespace, s3, write_tree

pytestmark = pytest.mark.integration
__all__ = ["bucket", "s3"]  # fixtures used by name
RFC3339_UTC = "%Y-%m-%dT%H:%M:%SZ"


def valid(command: str, document: Any) -> Any:
    jsonschema.Draft202012Validator(schema(command)).validate(document)
    return document


def test_every_command_json_matches_its_schema(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    src = tmp_path / "src"
    ns = namespace()
    write_tree(src, ns, 4, ranks=2)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    runs = [
        ("push", str(src), url, "--dry-run"),
        ("push", str(src), url),
        ("pull", url, str(tmp_path / "dst")),
        ("cp", url, f"s3://{bucket}/copy", "--dry-run"),
        ("cp", url, f"s3://{bucket}/copy"),
        ("ls", url),
        ("verify", url),
        ("verify", url, "--deep"),
        ("gc", url, "--max-bytes", f"{6 * BLOCK}", "--dry-run"),
        ("repair", url, "--from", str(src), "--dry-run"),
        ("repair", url, "--from", str(src)),
        ("gc", f"s3://{bucket}/copy", "--older-than", "0s", "--delete-empty-manifests"),
    ]
    s3.put_object(Bucket=bucket, Key="kv/notes.txt", Body=b"a stray key")
    for argv in runs:
        if argv[0] == "repair" and "--dry-run" in argv:
            key = block_key(ns, 0, prefix="kv")
            head = s3.head_object(Bucket=bucket, Key=key)
            s3.put_object(Bucket=bucket, Key=key, Body=b"x" * BLOCK, Metadata=head["Metadata"])
        result = cli(capsys, *argv, *conn, "--json")
        assert result.code in (0, 1), (argv, result.err)
        document = valid(argv[0], result.json)
        assert document["command"] == argv[0] and document["ok"] is (result.code == 0), argv
    key = cli(capsys, "key", url, "--manifest", str(src / ns.folder / "config.json"),
              "--block-hash", "00a1b2c3", "--json")  # fmt: skip
    assert valid("key", key.json)["manifest_key"] == f"{url}/{ns.folder}/config.json"
    assert {"manifest", "blocks"}.isdisjoint(key.json)  # not a status, not a count: renamed


def test_timestamps_are_rfc3339_utc_that_jq_reads(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    src = tmp_path / "src"
    write_tree(src, namespace(), 2)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    assert cli(capsys, "push", str(src), url, *conn).code == 0
    for location in (url, str(src)):
        row = cli(capsys, "ls", location, *conn, "--json").json["namespaces"][0]
        for when in (row["oldest"], row["newest"]):
            assert datetime.strptime(when, RFC3339_UTC) and when.endswith("Z"), when
            if shutil.which("jq"):
                jq = subprocess.run(["jq", "fromdateiso8601"], input=json.dumps(when),
                                    capture_output=True, text=True, check=True)  # fmt: skip
                assert int(jq.stdout) > 1_700_000_000


def test_one_name_and_type_per_meaning_across_schemas() -> None:
    types: dict[str, dict[str, Any]] = {}

    def walk(properties: dict[str, Any], where: str) -> None:
        for name, spec in properties.items():
            kind = spec.get("type", spec.get("const", spec.get("enum")))
            if isinstance(kind, list) and "null" in kind:  # null: not known, or not given
                kind = [k for k in kind if k != "null"]
                kind = kind[0] if len(kind) == 1 else kind
            kind = json.dumps(kind, sort_keys=True)
            if name != "command":  # the one field that names the document
                types.setdefault(name, {})[where] = kind
            items = spec.get("items", {})
            if isinstance(items, dict) and "properties" in items:
                walk(items["properties"], f"{where}.{name}[]")

    for command in SCHEMAS:
        walk(schema(command)["properties"], command)
    clashes = {name: seen for name, seen in types.items() if len(set(seen.values())) > 1}
    assert clashes == {}, clashes
    for where, kind in types["manifest"].items():  # a status string everywhere
        assert json.loads(kind) == "string", where
    assert {json.loads(k) for k in types["blocks"].values()} == {"integer"}


def test_dry_runs_say_would_and_text_and_json_use_the_same_words(
    capsys: Any, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    ns = namespace()
    write_tree(src, ns, 3)
    (src / ns.folder / "config.json").unlink()  # its blocks are left out
    dry = cli(capsys, "pull", str(src), str(tmp_path / "dst"), "--dry-run", "--json")
    assert {"copied", "replaced", "bytes_copied"}.isdisjoint(dry.json)
    assert (dry.json["would_copy"], dry.json["left_out"]) == (0, 3)
    text = cli(capsys, "pull", str(src), str(tmp_path / "dst"), "--dry-run").out
    assert "would copy 0 blocks" in text and "3 left out" in text and "skipped" not in text
    gc = cli(capsys, "gc", str(src), "--older-than", "0s", "--dry-run", "--json")
    assert gc.json["would_delete_blocks"] == 3 and "blocks_deleted" not in gc.json
    assert len(list(src.rglob("*.bin"))) == 3


def test_errors_are_json_on_stdout_under_json(
    capsys: Any, tmp_path: Path, moto_server: str
) -> None:
    cases = [
        (("ls", str(tmp_path / "nothing"), "--json"), 7, "no-match"),
        (("ls", "s3://no-such-bucket-s3kv/kv", "--endpoint-url", moto_server, "--json"), 3,
         "not-found"),
        (("push", str(tmp_path), "s3://b/kv", "--dryrun", "--json"), 2, "usage"),
        (("gc", str(tmp_path), "--json"), 2, "usage"),
    ]  # fmt: skip
    for argv, code, kind in cases:
        result = cli(capsys, *argv)
        assert result.code == code, (argv, result.err)
        error = valid("error", result.json)["error"]
        assert (error["code"], error["kind"]) == (code, kind), argv
        assert error["message"] in result.err  # the same one line on stderr
