"""Issue 20, points 3 and 4: one meaning of a location; nothing matched is exit 7.

A location holds the namespaces directly under it, for every command. Pointing one level
too high or too low, at a misspelled prefix, or filtering on a namespace or rank that is
not there fails with exit 7 and a one-line message naming what was meant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.day_two import bucket, cli, keys_in, namespace, s3, write_tree

pytestmark = pytest.mark.integration
__all__ = ["bucket", "s3"]  # fixtures used by name

EXIT_NO_MATCH = 7


def push_tree(capsys: Any, tmp_path: Path, url: str, endpoint: str, *models: str) -> Path:
    src = tmp_path / f"src-{len(list(tmp_path.iterdir()))}"
    for seed, model in enumerate(models or ("org/model-a", "org/model-b")):
        write_tree(src, namespace(model), 3, seed=seed)
    assert cli(capsys, "push", str(src), url, "--endpoint-url", endpoint).code == 0
    return src


def test_every_command_names_the_location_one_level_down(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    push_tree(capsys, tmp_path, f"s3://{bucket}/kv/team", moto_server)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    wanted = f"no namespaces directly under {url}; found 2 namespaces under {url}/team"
    for argv in (
        ("ls", url),
        ("verify", url),
        ("verify", url, "--deep"),
        ("pull", url, str(tmp_path / "dst")),
        ("cp", url, f"s3://{bucket}/copy"),
        ("gc", url, "--max-bytes", "1", "--dry-run"),
        ("gc", url, "--older-than", "0s"),
        ("repair", url, "--remove-unrepairable"),
    ):
        result = cli(capsys, *argv, *conn)
        assert result.code == EXIT_NO_MATCH, (argv, result.err)
        assert wanted in result.err and "did you mean that?" in result.err, (argv, result.err)
        assert len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "dst").exists() or not any((tmp_path / "dst").rglob("*.bin"))
    assert keys_in(s3, bucket, "copy/") == []
    assert len([k for k in keys_in(s3, bucket, "kv/team/") if k.endswith(".bin")]) == 6


def test_every_command_names_the_cache_root_of_a_directory_one_level_off(
    capsys: Any, tmp_path: Path
) -> None:
    root = tmp_path / "mnt" / "kv"
    ns = namespace()
    write_tree(root, ns, 2, ranks=2)
    too_high, folder, rank_folder = root.parent, root / ns.folder, root / f"{ns.folder}_r1"
    for location, meant in (
        (too_high, f"found 1 namespace under {root} - did you mean that?"),
        (folder, f"is a namespace folder, one level below its cache: the cache is at {root}"),
        (
            rank_folder,
            f"is a rank 1 folder of a namespace, one level below its cache: the cache is at {root}",
        ),
    ):
        for argv in (
            ("ls", str(location)),
            ("verify", str(location), "--deep"),
            ("push", str(location), "s3://bkt/kv", "--endpoint-url", "http://127.0.0.1:9"),
            ("cp", str(location), str(tmp_path / "copy")),
            ("gc", str(location), "--older-than", "0s"),
            ("repair", str(location), "--dry-run"),
        ):
            result = cli(capsys, *argv)
            assert result.code == EXIT_NO_MATCH, (argv, result.err)
            assert meant in result.err, (argv, result.err)
    assert not (tmp_path / "copy").exists()
    assert len(list(root.rglob("*.bin"))) == 4  # gc deleted nothing
    rank = cli(capsys, "ls", str(rank_folder))
    assert f"--namespace {ns.folder} --rank 1" in rank.err  # how to keep to that folder


def test_a_cache_nested_below_a_location_is_left_out_and_named(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    push_tree(capsys, tmp_path, url, moto_server, "org/direct")
    push_tree(capsys, tmp_path, f"{url}/team", moto_server, "org/nested-a", "org/nested-b")
    note = f"2 namespaces under {url}/team: not part of {url}"

    ls = cli(capsys, "ls", url, *conn, "--json")
    assert ls.code == 0 and [r["model"] for r in ls.json["namespaces"]] == ["org/direct"]
    assert ls.json["nested"] == [{"location": f"{url}/team", "namespace_count": 2}]
    assert note in cli(capsys, "ls", url, *conn).out
    pull = cli(capsys, "pull", url, str(tmp_path / "dst"), *conn, "--json")
    assert pull.code == 0, pull.out  # nested keys are not strays: nothing refused
    assert (pull.json["copied"], pull.json["stray_keys"]) == (3, 0)
    assert len(list((tmp_path / "dst").rglob("*.bin"))) == 3  # no flattened second cache
    verify = cli(capsys, "verify", url, *conn, "--deep", "--json")
    assert verify.code == 0 and verify.json["blocks"] == 3 and verify.json["counts"] == {}
    gc = cli(capsys, "gc", url, "--older-than", "0s", *conn, "--json")
    assert gc.json["blocks_deleted"] == 3 and note in cli(capsys, "ls", url, *conn).out
    assert cli(capsys, "ls", f"{url}/team", *conn, "--json").json["blocks"] == 6


def test_a_misspelled_location_is_exit_7_with_the_closest_name(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    push_tree(capsys, tmp_path, f"s3://{bucket}/team/kv-cache", moto_server)
    conn = ("--endpoint-url", moto_server)
    typo = f"s3://{bucket}/team/kv-cahce"
    for argv in (
        ("ls", typo),
        ("verify", typo, "--deep"),
        ("pull", typo, str(tmp_path / "dst")),
        ("gc", typo, "--older-than", "7d"),
    ):
        result = cli(capsys, *argv, *conn)
        assert result.code == EXIT_NO_MATCH, (argv, result.err)
        assert f"did you mean s3://{bucket}/team/kv-cache?" in result.err, result.err
    local = tmp_path / "cache"
    write_tree(local, namespace(), 1)
    result = cli(capsys, "push", str(tmp_path / "cahce"), f"s3://{bucket}/x", *conn)
    assert result.code == EXIT_NO_MATCH
    assert "(no such directory)" in result.err and f"did you mean {local}?" in result.err


def test_a_namespace_or_rank_that_matches_nothing_is_exit_7_with_the_closest(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    src = tmp_path / "src"
    ns = namespace()
    write_tree(src, ns, 2, ranks=2)
    write_tree(src, namespace("Qwen/Qwen3-0.6B"), 2, seed=1)
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    truncated = ns.digest[:-1]
    push = cli(capsys, "push", str(src), url, "--namespace", truncated, *conn)
    assert push.code == EXIT_NO_MATCH
    assert f"--namespace {truncated} matched no namespace at {src}" in push.err
    assert f"did you mean {ns.digest}" in push.err
    assert keys_in(s3, bucket) == []  # refused before anything was written
    misspelled = ns.folder.replace("Llama", "Lama")
    push = cli(capsys, "push", str(src), url, "--namespace", misspelled, *conn, "--json")
    assert push.code == EXIT_NO_MATCH and push.json["error"]["kind"] == "no-match"
    assert push.json["error"]["suggestions"][0] == ns.folder
    rank = cli(capsys, "push", str(src), url, "--namespace", ns.digest, "--rank", "3", *conn)
    assert rank.code == EXIT_NO_MATCH and "--rank 3 matched no block" in rank.err
    assert "ranks present: 0, 1" in rank.err

    assert cli(capsys, "push", str(src), url, *conn).code == 0
    for argv in (
        ("pull", url, str(tmp_path / "dst"), "--namespace", "nosuchmodel_000000000000"),
        ("cp", url, f"s3://{bucket}/copy", "--rank", "7"),
        ("pull", url, str(tmp_path / "dst"), "--namespace", ns.digest, "--rank", "2"),
    ):
        result = cli(capsys, *argv, *conn)
        assert result.code == EXIT_NO_MATCH, (argv, result.err)
    assert not (tmp_path / "dst").exists() and keys_in(s3, bucket, "copy/") == []
    ok = cli(capsys, "pull", url, str(tmp_path / "dst"), "--namespace", ns.digest, "--rank", "1",
             *conn)  # fmt: skip
    assert ok.code == 0 and len(list((tmp_path / "dst").rglob("*.bin"))) == 2


def test_verify_of_an_empty_location_fails_unless_allowed(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    url, conn = f"s3://{bucket}/nothing/here", ("--endpoint-url", moto_server)
    for argv in (
        ("verify", url),
        ("verify", url, "--deep"),
        ("ls", url),
        ("gc", url, "--older-than", "1d"),
    ):
        result = cli(capsys, *argv, *conn)
        assert result.code == EXIT_NO_MATCH, (argv, result.err)
        assert "--allow-empty" in result.err
        allowed = cli(capsys, *argv, *conn, "--allow-empty")
        assert allowed.code == 0, (argv, allowed.err)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli(capsys, "verify", str(empty), "--deep").code == EXIT_NO_MATCH
    assert cli(capsys, "verify", str(empty), "--deep", "--allow-empty").code == 0
    pushed = cli(capsys, "push", str(empty), f"s3://{bucket}/kv", *conn, "--allow-empty")
    assert pushed.code == 0 and "copied 0 blocks" in pushed.out


def test_key_names_the_cache_location_when_given_a_namespace_folder(
    capsys: Any, tmp_path: Path
) -> None:
    ns = namespace()
    write_tree(tmp_path / "kv", ns, 1)
    manifest = str(tmp_path / "kv" / ns.folder / "config.json")
    low = cli(capsys, "key", f"s3://bkt/kv/{ns.folder}", "--manifest", manifest)
    assert low.code == 0
    assert "one level below a cache" in low.err and "s3://bkt/kv - did you mean that?" in low.err
    right = cli(capsys, "key", "s3://bkt/kv", "--manifest", manifest)
    assert right.err == "" and f"s3://bkt/kv/{ns.folder}/config.json" in right.out
