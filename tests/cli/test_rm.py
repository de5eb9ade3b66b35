"""Issue 29, point 1: ``s3kv rm`` as a user runs it (the library's guards against writers:
tests/functional/test_remove.py).

What would go is shown first; a terminal is asked, a script must say ``--yes``; ``--json``
follows rm.json; a filter that matches nothing is exit 7 with the closest names; other
namespaces stay; gc and rm never delete at once on one location.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from s3kv.cli.jsondoc import schema
from s3kv.naming.location import parse_location
from s3kv.ops.gc.lease import GCLease
from s3kv.settings import S3Settings
from s3kv.stores import open_store
from tests.cli.day_two import bucket, cli, keys_in, namespace, s3, write_tree

pytestmark = pytest.mark.integration
__all__ = ["bucket", "s3"]  # fixtures used by name

OLD = namespace("org/old-model", tp_size=2)
KEEP = namespace("org/new-model")


class Terminal(io.StringIO):
    """stdin on a terminal, with the user's answer typed in."""

    def isatty(self) -> bool:
        return True


def pushed(capsys: Any, tmp_path: Path, url: str, endpoint: str) -> None:
    src = tmp_path / "src"
    write_tree(src, OLD, 3, ranks=2)
    write_tree(src, KEEP, 2, seed=1)
    assert cli(capsys, "push", str(src), url, "--endpoint-url", endpoint).code == 0


def test_rm_shows_what_would_go_then_asks(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    pushed(capsys, tmp_path, url, moto_server)
    before = keys_in(s3, bucket)

    dry = cli(capsys, "rm", url, "--model", "org/old-model", "--dry-run", *conn)
    assert dry.code == 0
    assert f"would remove: {OLD.folder} (org/old-model): ranks 0-1, 6 blocks, 24.0 KiB" in dry.out
    assert "rm: would free 24.0 KiB (would delete 6 blocks, 1 manifest" in dry.out
    script = cli(capsys, "rm", url, "--model", "org/old-model", *conn)  # stdin: no terminal
    assert script.code == 2 and "pass --yes" in script.err
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    declined = cli(capsys, "rm", url, "--model", "org/old-model", *conn)
    assert declined.code == 1 and "[y/N]" in declined.err and "declined" in declined.err
    assert keys_in(s3, bucket) == before  # nothing deleted by any of these

    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    removed = cli(capsys, "rm", url, "--model", "org/old-model", *conn)
    assert removed.code == 0, removed.err
    assert f"would remove: {OLD.folder}" in removed.err  # the plan, asked about
    assert "Remove 1 namespace (6 blocks, 24.0 KiB) from" in removed.err
    assert "rm: freed 24.0 KiB (6 blocks, 1 manifest, 0 stale temp files)" in removed.out
    assert [k for k in keys_in(s3, bucket) if OLD.folder in k] == []
    assert [k for k in keys_in(s3, bucket) if KEEP.folder in k] == [
        k for k in before if KEEP.folder in k]  # fmt: skip
    listed = cli(capsys, "ls", url, *conn, "--json").json
    assert [n["folder"] for n in listed["namespaces"]] == [KEEP.folder]


def test_rm_json_follows_its_schema_and_says_would(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    pushed(capsys, tmp_path, url, moto_server)
    validator = jsonschema.Draft202012Validator(schema("rm"))
    dry = cli(capsys, "rm", url, "--namespace", OLD.digest, "--dry-run", "--json", *conn)
    validator.validate(dry.json)
    assert dry.json["would_delete_blocks"] == 6 and "blocks_deleted" not in dry.json
    done = cli(capsys, "rm", url, "--namespace", OLD.digest, "--yes", "--json", *conn)
    validator.validate(done.json)
    assert done.code == 0 and done.json["ok"] is True
    assert (done.json["blocks_deleted"], done.json["manifests_deleted"]) == (6, 1)
    (row,) = done.json["namespaces"]
    assert (row["folder"], row["ranks"], row["manifest"], row["blocks_left"]) == (
        OLD.folder, [0, 1], "present", 0)  # fmt: skip
    assert done.err.startswith("rm: freed")  # the summary goes to stderr under --json
    gone = cli(capsys, "rm", url, "--namespace", OLD.digest, "--yes", "--json", *conn)
    assert gone.code == 7 and gone.json["error"]["kind"] == "no-match"
    jsonschema.Draft202012Validator(schema("error")).validate(gone.json)


def test_rm_names_what_was_meant_and_needs_a_filter(capsys: Any, tmp_path: Path) -> None:
    write_tree(tmp_path, OLD, 1)
    bare = cli(capsys, "rm", str(tmp_path), "--yes")
    assert bare.code == 2
    assert "rm needs --namespace FOLDER|DIGEST, --model NAME or --tenant NAME" in bare.err
    typo = cli(capsys, "rm", str(tmp_path), "--model", "org/old-modle", "--yes", "--json")
    assert typo.code == 7 and "did you mean org_old-model?" in typo.json["error"]["message"]
    assert typo.json["error"]["suggestions"] == ["org_old-model"]
    digest = cli(capsys, "rm", str(tmp_path), "--namespace", OLD.digest[:8], "--yes")
    assert digest.code == 7 and f"did you mean {OLD.digest}" in digest.err
    folder = cli(capsys, "rm", str(tmp_path / OLD.folder), "--namespace", OLD.digest, "--yes")
    assert folder.code == 7 and "no namespaces directly under" in folder.err
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) == 2  # nothing removed


def test_rm_waits_for_no_gc(capsys: Any, tmp_path: Path) -> None:
    write_tree(tmp_path, OLD, 1)
    loc = parse_location(str(tmp_path))
    settings = S3Settings.resolve()
    store = open_store(loc, settings)
    lease = GCLease(store, loc, settings)
    lease.acquire()  # a gc running on the location
    try:
        held = cli(capsys, "rm", str(tmp_path), "--namespace", OLD.folder, "--yes")
        assert held.code == 1 and "another s3kv gc is running" in held.err
    finally:
        lease.release()
        store.close()
    assert cli(capsys, "rm", str(tmp_path), "--namespace", OLD.folder, "--yes").code == 0
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
