"""Every answer checked for what it claims (issue 19, points 4, 10 and 12): a 200 that is
no S3 answer, deletes the store did not confirm, writes whose answer was lost, a store
that ignores If-None-Match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from s3kv import StoreError, UnsupportedByStoreError, Uploader
from s3kv.ops.gc.collect import gc
from tests.faults.conftest import NS, cli, keys, rows, seed_blocks, settings, write_tree

pytestmark = pytest.mark.integration


def blocks_in(s3: Any, bucket: str, prefix: str) -> list[str]:
    resp = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for o in resp.get("Contents", ()) if o["Key"].endswith(".bin")]


@pytest.mark.parametrize("fault", ["html", "empty"])
def test_a_server_that_is_not_s3_is_an_error_naming_it(
    proxy: Any,
    bucket: str,
    s3: Any,
    data_path: str,
    fault: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A console port or captive portal: every request gets a 200 page (or an empty 200).
    p = proxy(lambda r: fault)
    write_tree(tmp_path / "src", 4)
    code, out, err = cli(
        capsys, "push", str(tmp_path / "src"), f"s3://{bucket}/kv", endpoint=p.url,
        data_path=data_path,
    )
    assert code == 5, (out, err)  # today: "copied 4 blocks", exit 0
    assert "not an S3 answer" in err and f"127.0.0.1:{p.port}" in err
    assert "Traceback" not in err
    up = Uploader(f"s3://{bucket}/kv", NS, settings=settings(p.url, data_path))
    with up, pytest.raises(StoreError, match="not an S3 answer"):
        up.put_blocks(dict(zip(keys(2), rows(2))))
    assert blocks_in(s3, bucket, "kv/") == []


def test_puts_answered_with_an_empty_200_are_retried_not_counted(
    proxy: Any,
    bucket: str,
    s3: Any,
    data_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A third of the block PUTs never reach the store and get an empty 200 (no ETag).
    p = proxy(lambda r: "empty" if r.is_block and r.method == "PUT" and r.attempt == 1
              and hash(r.path) % 3 == 0 else None)
    write_tree(tmp_path / "src", 9)
    code, out, err = cli(
        capsys, "push", str(tmp_path / "src"), f"s3://{bucket}/cli", "--json", endpoint=p.url,
        data_path=data_path,
    )
    assert code == 0, err
    assert json.loads(out)["copied"] == 9
    assert len(blocks_in(s3, bucket, "cli/")) == 9  # today: the dropped ones are missing
    ks = keys(9)
    with Uploader(f"s3://{bucket}/lib", NS, settings=settings(p.url, data_path)) as up:
        report = up.put_blocks(dict(zip(ks, rows(9))))
    assert sorted(report.stored) == sorted(ks)
    assert len(blocks_in(s3, bucket, "lib/")) == 9
    assert p.injected("empty")


@pytest.mark.parametrize("fault", ["html", "empty"])
def test_gc_counts_only_deletes_the_store_confirmed(
    proxy: Any,
    bucket: str,
    s3: Any,
    moto_server: str,
    data_path: str,
    fault: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"s3://{bucket}/kv"
    seed_blocks(url, moto_server, 5)
    p = proxy(lambda r: fault if r.method == "POST" and "delete" in r.query else None)
    code, out, _err = cli(
        capsys, "gc", url, "--older-than", "0s", "--delete-empty-manifests", "--json",
        endpoint=p.url, data_path=data_path,
    )
    report = json.loads(out)
    assert code == 1 and report["blocks_deleted"] == 0 and report["manifests_deleted"] == 0
    assert len(report["failures"]) == 5  # today: 5 deleted, then the manifest too
    assert len(blocks_in(s3, bucket, "kv/")) == 5
    assert any(k["Key"].endswith("config.json") for k in s3.list_objects_v2(
        Bucket=bucket, Prefix="kv/")["Contents"])
    # The library says the same, and a confirmed delete still counts.
    direct = gc(url, older_than=0, settings=settings(moto_server, data_path))
    assert direct.blocks_deleted == 5 and direct.ok


def test_a_write_whose_answer_was_lost_counts_as_stored(
    proxy: Any,
    bucket: str,
    s3: Any,
    data_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Every block PUT reaches the store, which keeps it; the answer is then reset. The
    # retry gets 412: the object is ours (our checksum), so it was stored, not present.
    p = proxy(lambda r: "reset-after" if r.is_block and r.method == "PUT" and r.attempt == 1
              else None)
    ks = keys(4)
    with Uploader(f"s3://{bucket}/lib", NS, settings=settings(p.url, data_path)) as up:
        report = up.put_blocks(dict(zip(ks, rows(4))))
        again = up.put_blocks(dict(zip(ks, rows(4))))  # nothing lost now: present
    assert sorted(report.stored) == sorted(ks) and not report.already_present
    assert sorted(again.already_present) == sorted(ks)
    write_tree(tmp_path / "src", 4)
    code, out, _err = cli(
        capsys, "push", str(tmp_path / "src"), f"s3://{bucket}/cli", "--json", endpoint=p.url,
        data_path=data_path,
    )
    summary = json.loads(out)
    assert code == 0 and summary["copied"] == 4 and summary["already_present"] == 0
    assert len(p.injected("reset-after")) == 8


def test_a_block_someone_else_stored_stays_already_present(
    proxy: Any, bucket: str, moto_server: str, data_path: str
) -> None:
    # A lost answer, then 412, but the object holds another checksum: not ours.
    url = f"s3://{bucket}/kv"
    ks = keys(2)
    theirs = rows(2, seed=1)
    with Uploader(url, NS, settings=settings(moto_server, "botocore")) as up:
        assert up.put_blocks(dict(zip(ks, theirs))).ok
    p = proxy(lambda r: "reset" if r.is_block and r.method == "PUT" and r.attempt == 1 else None)
    with Uploader(url, NS, settings=settings(p.url, data_path)) as up:
        report = up.put_blocks(dict(zip(ks, rows(2, seed=2))))
    assert sorted(report.already_present) == sorted(ks) and not report.stored


@pytest.mark.parametrize("existing", [False, True])
def test_a_store_that_ignores_if_none_match_is_refused(
    proxy: Any,
    bucket: str,
    moto_server: str,
    s3: Any,
    data_path: str,
    existing: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"s3://{bucket}/kv"
    if existing:  # the manifest (and blocks) are there from an earlier run
        seed_blocks(url, moto_server, 3)
    before = blocks_in(s3, bucket, "kv/")
    p = proxy(lambda r: "drop-inm" if r.method == "PUT" else None)
    up = Uploader(url, NS, settings=settings(p.url, data_path))
    with up, pytest.raises(UnsupportedByStoreError, match="ignores If-None-Match"):
        up.put_blocks(dict(zip(keys(4), rows(4))))
    assert blocks_in(s3, bucket, "kv/") == before  # today: 4 blocks written, "stored"
    assert not p.seen("PUT", blocks=True)
    write_tree(tmp_path / "src", 3)
    code, _out, err = cli(
        capsys, "push", str(tmp_path / "src"), url, endpoint=p.url, data_path=data_path
    )
    assert code == 5 and "ignores If-None-Match" in err and "Traceback" not in err
    assert not p.seen("PUT", blocks=True)


def test_a_put_whose_checksum_comes_back_changed_is_not_trusted(
    proxy: Any, bucket: str, s3: Any, data_path: str
) -> None:
    # Every PUT's answer names another checksum than the one sent: S3 would have refused
    # such a body (BadDigest), so the answer is no answer to this write. Each block is
    # written again and counted stored only as the object holding its own write token.
    p = proxy(lambda r: "bad-echo" if r.is_block and r.method == "PUT" else None)
    ks, data = keys(2), rows(2)
    with Uploader(f"s3://{bucket}/kv", NS, settings=settings(p.url, data_path)) as up:
        report = up.put_blocks(dict(zip(ks, data)))
        stored = {k: up.keys.key_for(k) for k in ks}
    assert sorted(report.stored) == sorted(ks)
    assert len(p.injected("bad-echo")) >= 4  # each block's answer doubted, then settled
    for key, row in zip(ks, data):
        assert s3.get_object(Bucket=bucket, Key=stored[key])["Body"].read() == row.tobytes()


def test_the_create_only_proof_costs_one_put(proxy: Any, bucket: str, data_path: str) -> None:
    p = proxy()
    with Uploader(f"s3://{bucket}/kv", NS, settings=settings(p.url, data_path)) as up:
        assert up.ensure_manifest()
    puts = p.seen("PUT")
    assert len(puts) == 2 and {r.path for r in puts} == {puts[0].path}
    assert all(r.header("if-none-match") == "*" for r in puts)
