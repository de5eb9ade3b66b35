"""Issue 29, points 2 and 6: what a prefix holds, and a bucket a fleet can graph.

``ls`` shows each namespace's block size and s3kv's record in its manifest (created,
s3kv and vLLM versions; ``-``/null for a manifest written without one), names are never
cut into a pipe, JSON says null for "none", and ``--prometheus`` prints bytes and blocks
per namespace and time since last use in Prometheus's text format, as Prometheus's own
client parses it. (On a terminal: tests/cli/test_ls.py.)
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from s3kv import Uploader, __version__
from s3kv.cli.ls_prometheus import METRICS, PREFIX, exposition
from s3kv.ops.inventory import inventory
from s3kv.settings import S3Settings
from tests.cli.day_two import BLOCK, block_bytes, block_hash, bucket, cli, namespace, s3, write_tree

pytestmark = pytest.mark.integration
__all__ = ["bucket", "s3"]  # fixtures used by name

LONG = "an-organisation-with-a-long-name/a-fine-tuned-model-with-a-long-name-" + "x" * 40


def tier_written(url: str, settings: S3Settings, model: str, blocks: int) -> None:
    """A namespace as s3kv's vLLM tier writes it (its Uploader, told the vLLM version)."""
    with Uploader(url, namespace(model), settings=settings, vllm_version="0.33.0") as up:
        assert up.put_blocks({(block_hash(i), 0): block_bytes(i) for i in range(blocks)}).ok


def test_ls_shows_block_size_and_who_created_each_manifest(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str
) -> None:
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    before = datetime.now(timezone.utc).replace(microsecond=0)
    tier_written(url, S3Settings.resolve(endpoint_url=moto_server), LONG, 3)
    src = tmp_path / "src"
    vllm_fs = namespace("Qwen/Qwen3-0.6B")
    write_tree(src, vllm_fs, 2)  # vLLM's fs tier: its config.json records nothing
    assert cli(capsys, "push", str(src), url, *conn).code == 0

    listed = cli(capsys, "ls", url, *conn, "--json")
    assert listed.code == 0
    rows = {r["model"]: r for r in listed.json["namespaces"]}
    ours, theirs = rows[LONG], rows["Qwen/Qwen3-0.6B"]
    assert ours["block_bytes"] == theirs["block_bytes"] == BLOCK
    assert (ours["s3kv_version"], ours["vllm_version"]) == (__version__, "0.33.0")
    created = datetime.strptime(ours["created"], "%Y-%m-%dT%H:%M:%SZ")
    assert before <= created.replace(tzinfo=timezone.utc) <= datetime.now(timezone.utc)
    assert (theirs["created"], theirs["s3kv_version"], theirs["vllm_version"]) == (None,) * 3
    assert ours["problem"] is None and theirs["problem"] is None  # null, not ""
    assert ours["blocks_by_last_use"] == {"within_1h": 3, "1h_to_1d": 0, "1d_to_7d": 0,
                                          "over_7d": 0}  # fmt: skip

    text = cli(capsys, "ls", url, *conn)  # into a pipe: nothing cut, however long
    assert "..." not in text.out
    ours_folder = namespace(LONG).folder
    written = [line.split() for line in text.out.splitlines() if line.startswith(ours_folder)]
    assert len(written) == 3  # the three tables, the folder whole in each
    when = created.strftime("%Y-%m-%d %H:%M")
    assert written[2] == [ours_folder, "4.0", "KiB", *when.split(), __version__, "0.33.0"]
    theirs_row = next(line.split() for line in text.out.splitlines()[-4:]
                      if line.startswith(vllm_fs.folder))  # fmt: skip
    assert theirs_row == [vllm_fs.folder, "4.0", "KiB", "-", "-", "-"]


def test_json_says_null_for_a_sound_manifest_and_names_a_bad_one(
    capsys: Any, tmp_path: Path
) -> None:
    ns = namespace()
    write_tree(tmp_path, ns, 1)
    listed = cli(capsys, "ls", str(tmp_path), "--json")
    assert listed.json["namespaces"][0]["problem"] is None
    (tmp_path / ns.folder / "config.json").write_text('{"model_name": "x"}')
    bad = cli(capsys, "ls", str(tmp_path), "--json").json["namespaces"][0]
    assert bad["manifest"] == "invalid" and "lacks required field" in bad["problem"]
    pulled = cli(capsys, "pull", str(tmp_path), str(tmp_path.parent / "dst"), "--json")
    assert pulled.json["namespaces"][0]["problem"] and pulled.code == 1


def test_prometheus_output_parses_and_adds_up(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any
) -> None:
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", moto_server)
    tier_written(url, S3Settings.resolve(endpoint_url=moto_server), "org/a", 3)
    tier_written(url, S3Settings.resolve(endpoint_url=moto_server), 'org/"quoted"-m', 2)
    as_json = cli(capsys, "ls", url, *conn, "--json").json
    result = cli(capsys, "ls", url, *conn, "--prometheus")
    assert result.code == 0 and result.err.startswith("ls: 2 namespaces")  # summary: stderr
    families = {f.name: f for f in text_string_to_metric_families(result.out)}
    assert set(families) == {PREFIX + name for name in METRICS}
    assert all(f.type == "gauge" and f.documentation for f in families.values())
    for row in as_json["namespaces"]:
        for metric, field in (("bytes", "bytes_by_last_use"), ("blocks", "blocks_by_last_use")):
            got = {
                s.labels["last_use"]: s.value
                for s in families[PREFIX + metric].samples
                if s.labels["folder"] == row["folder"]
            }
            assert got == row[field] and {s.labels["location"] for s in
                                          families[PREFIX + metric].samples} == {url}  # fmt: skip
        sizes = [s for s in families[PREFIX + "block_bytes"].samples
                 if s.labels["model"] == row["model"]]  # fmt: skip
        assert [s.value for s in sizes] == [BLOCK]  # the model name survived its quotes
    assert families[PREFIX + "namespaces"].samples[0].value == 2
    stamp = families[PREFIX + "listing_timestamp_seconds"].samples[0].value
    assert abs(stamp - datetime.now(timezone.utc).timestamp()) < 60
    both = cli(capsys, "ls", url, *conn, "--prometheus", "--json")
    assert both.code == 2 and "not both" in both.err


def test_prometheus_buckets_follow_the_time_since_last_use(tmp_path: Path) -> None:
    write_tree(tmp_path, namespace(), 2)
    later = datetime.now(timezone.utc) + timedelta(days=3)
    text = exposition(inventory(str(tmp_path), now=later), now=later.timestamp())
    samples = {
        (f.name, s.labels["last_use"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if "last_use" in s.labels
    }
    assert samples[(PREFIX + "blocks", "1d_to_7d")] == 2
    assert samples[(PREFIX + "bytes", "1d_to_7d")] == 2 * BLOCK
    assert samples[(PREFIX + "blocks", "within_1h")] == 0
    assert json.loads(json.dumps(text))  # plain text, no bytes that are not UTF-8
