"""bench/bench_bulk.py's caches: vLLM's own fs tier writes them (bench/lib/bulk_vllm_writer.py),
and s3kv's writer, used where .venv-vllm is missing, writes the same layout: the same
namespace folder and config.json, block files named as vLLM's FileMapper names them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.lib import bulk_tree, bulk_vllm_writer

pytestmark = pytest.mark.vllm

BLOCK = 64 * 1024


def blocks_of(root: Path) -> dict[str, int]:
    return {p: n for p, n in bulk_tree.files(root).items() if p.endswith(".bin")}


def test_vllm_s_fs_tier_writes_the_cache_and_s3kv_s_writer_the_same_layout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs = tmp_path / "s3kv", tmp_path / "vllm"
    monkeypatch.setattr(bulk_vllm_writer, "BATCH_BYTES", 2 * BLOCK)  # 5 blocks: 2, 2, 1
    info = bulk_vllm_writer.write(theirs, BLOCK, 5, seed=3)
    assert info["writer"] == "vllm-fs-tier" and info["vllm"].startswith("0.33")
    assert bulk_tree.write_cache(ours, BLOCK, 5, 3, writer="s3kv")["writer"] == "s3kv-layout"

    (folder,) = [p.name for p in theirs.iterdir() if not p.name.endswith("_r0")]
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir()) \
        == [folder, f"{folder}_r0"]
    config = f"{folder}/config.json"
    assert (ours / config).read_bytes() == (theirs / config).read_bytes()
    name = re.compile(rf"{folder}_r0/([0-9a-f]{{3}})/([0-9a-f]{{2}})_g0/\1\2[0-9a-f]{{59}}\.bin")
    for root in (ours, theirs):
        found = blocks_of(root)
        assert len(found) == 5 and set(found.values()) == {BLOCK}
        assert all(name.fullmatch(p) for p in found), sorted(found)
    # vLLM's rows were filled with random bytes, one batch after another: all differ
    contents = {(theirs / p).read_bytes() for p in blocks_of(theirs)}
    assert len(contents) == 5
