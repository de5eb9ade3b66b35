"""Blocks the lifecycle rule cannot see (issue 28, point 2): ``verify --tags`` finds them,
``repair --tags`` tags them (``--dry-run`` first).

The bucket's lifecycle rule filters on the ``s3kv-object=block`` tag; a block without it
(written by another tool, or whose re-tag after a renewal failed on Ceph RGW, which drops
tags on copy) never expires. Run through the CLI, every document checked against its
JSON schema; on every S3 backend (Ceph RGW included).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from s3kv import KeyMapper, Namespace, Uploader, make_offload_key
from s3kv.cli.jsondoc import schema
from s3kv.transfers.transfer import BLOCK_TAGS
from tests.cli.day_two import cli
from tests.conftest import Backend
from tests.functional.test_gc_lease import _env

pytestmark = pytest.mark.functional

NS = Namespace(model_name="Qwen/Qwen3-0.6B", tokens_per_hash=16, dtype="bfloat16")


def _json(capsys: pytest.CaptureFixture[str], command: str, *args: str) -> tuple[int, Any]:
    result = cli(capsys, command, *args, "--json")
    doc = result.json
    jsonschema.Draft202012Validator(schema(command)).validate(doc)
    return result.code, doc


def _tags(backend: Backend, key: str) -> dict[str, str]:
    got = backend.client.get_object_tagging(Bucket=backend.bucket, Key=key)
    return {t["Key"]: t["Value"] for t in got.get("TagSet", [])}


def test_verify_finds_and_repair_tags_blocks_the_lifecycle_rule_cannot_see(
    every_s3_backend: Backend, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = every_s3_backend
    keys = [make_offload_key(bytes([9, i]) * 16, 0) for i in range(4)]
    with Uploader(backend.location, NS, settings=backend.settings) as up:
        assert up.put_blocks({k: bytes([i]) * 512 for i, k in enumerate(keys)}).ok
    mapper = KeyMapper(NS, prefix="team/kv")
    untagged, wrong = mapper.key_for(keys[1]), mapper.key_for(keys[2])
    backend.client.delete_object_tagging(Bucket=backend.bucket, Key=untagged)
    backend.client.put_object_tagging(Bucket=backend.bucket, Key=wrong, Tagging={
        "TagSet": [{"Key": "s3kv-object", "Value": "manifest"}]})
    _env(monkeypatch, backend)

    code, plain = _json(capsys, "verify", backend.location)
    assert code == 0 and plain["tags_checked"] is None  # tags cost a request: asked for
    code, found = _json(capsys, "verify", backend.location, "--tags")
    assert code == 1 and found["tags_checked"] == 4
    assert found["counts"] == {"untagged": 1, "wrong-tag": 1}
    kinds = {f["key"]: f["kind"] for f in found["findings"]}
    assert kinds == {untagged: "untagged", wrong: "wrong-tag"}
    assert all("repair --tags" in f["message"] for f in found["findings"])

    code, dry = _json(capsys, "repair", backend.location, "--tags", "--dry-run")
    assert code == 1 and dry["would_tag"] == 2 and "tagged" not in dry
    assert _tags(backend, untagged) == {}  # a dry run writes nothing
    code, done = _json(capsys, "repair", backend.location, "--tags")
    assert code == 0 and done["tagged"] == 2 and done["damaged"] == 0
    assert {a["key"].rsplit("/", 1)[1]: a["action"] for a in done["actions"]} == {
        untagged.rsplit("/", 1)[1]: "tagged", wrong.rsplit("/", 1)[1]: "tagged"}
    assert _tags(backend, untagged) == BLOCK_TAGS and _tags(backend, wrong) == BLOCK_TAGS
    code, clean = _json(capsys, "verify", backend.location, "--tags")
    assert code == 0 and clean["counts"] == {}
    manifest = mapper.config_key()
    assert _tags(backend, manifest) == {}  # manifests are never tagged: they never expire


def test_a_directory_keeps_no_tags(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "cache"
    with Uploader(str(root), NS) as up:
        assert up.put_blocks({make_offload_key(b"\x01" * 32, 0): b"x" * 64}).ok
    result = cli(capsys, "verify", str(root), "--tags", "--json")
    assert result.code == 0 and result.json["tags_checked"] is None
