"""The caches bench/bench_bulk.py copies, and the byte-for-byte check of every pulled tree.

A cache is a directory in vLLM's filesystem-tier layout (``<model>_<digest>/config.json``
and ``<model>_<digest>_r0/<hhh>/<hh>_g0/<hash>.bin``), written by vLLM 0.33.0's own fs
tier when .venv-vllm exists (bench/lib/bulk_vllm_writer.py runs there), else by s3kv's
``KeyMapper`` and ``LocalStore``, which name files as vLLM's ``FileMapper`` does
(tests/vllm/test_keys.py holds them to it). The JSON records which.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
WRITER = Path(__file__).resolve().parent / "bulk_vllm_writer.py"
MODEL = "Qwen/Qwen3-0.6B"
LAYERS = ("model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn")
"""The namespace tests/vllm/harness.py gives vLLM's fs tier: both writers name the same
folder and write the same config.json (tests/vllm/test_bench_bulk_writer.py)."""
CHUNK = 1 << 20


def choose_writer(asked: str) -> str:
    """``vllm`` or ``s3kv``: ``auto`` is vLLM's own tier whenever .venv-vllm exists."""
    if asked == "auto":
        return "vllm" if VLLM_PYTHON.exists() else "s3kv"
    if asked == "vllm" and not VLLM_PYTHON.exists():
        raise SystemExit(f"--writer vllm: {VLLM_PYTHON} does not exist; build it with "
                         "`make vllm-venv`, or pass --writer s3kv")
    if asked not in ("vllm", "s3kv"):
        raise SystemExit(f"--writer {asked!r}: auto, vllm or s3kv")
    return asked


def write_cache(root: Path, block_bytes: int, blocks: int, seed: int,
                writer: str) -> dict[str, Any]:
    """``blocks`` random blocks of ``block_bytes`` under ``root``; who wrote them."""
    if writer == "vllm":
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([str(VLLM_PYTHON), str(WRITER), str(root), str(block_bytes),
                               str(blocks), str(seed)], capture_output=True, text=True,
                              env=env, timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(f"vLLM's fs tier could not write the cache under {root}: "
                             f"{proc.stderr.strip()[-1500:]}")
        info: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return info
    return _s3kv_writer(root, block_bytes, blocks, seed)


def _s3kv_writer(root: Path, block_bytes: int, blocks: int, seed: int) -> dict[str, Any]:
    import numpy as np

    import s3kv
    from s3kv.naming.keys import KeyMapper, make_offload_key
    from s3kv.naming.namespace import KVCacheGroup, Namespace
    from s3kv.stores import LocalStore, PutOptions

    ns = Namespace(model_name=MODEL, tokens_per_hash=16, dtype="bfloat16",
                   parallel_agnostic=True,  # as vLLM's fs tier builds its FileMapper
                   kv_cache_groups=[KVCacheGroup(tokens_per_block=16, layer_names=LAYERS)])
    store, keys = LocalStore(root), KeyMapper(ns)
    store.put(keys.config_key(), ns.manifest_bytes(), PutOptions())
    rng = np.random.default_rng(seed)
    for _ in range(blocks):
        key = keys.key_for(make_offload_key(rng.bytes(32), 0))
        store.put(key, rng.bytes(block_bytes), PutOptions())
    return {"writer": "s3kv-layout", "s3kv": s3kv.__version__}


def describe(info: dict[str, Any]) -> str:
    """One line for the table: who wrote the caches."""
    if info.get("writer") == "vllm-fs-tier":
        return f"vLLM {info.get('vllm', '?')}'s own fs tier (FileSystemTierManager)"
    return "s3kv's writer of vLLM's fs-tier layout (KeyMapper, LocalStore)"


def files(root: Path) -> dict[str, int]:
    """Every regular file under ``root``: its path relative to ``root`` -> its size."""
    out: dict[str, int] = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            if path.is_file():
                out[path.relative_to(root).as_posix()] = path.stat().st_size
    return out


def _same_bytes(a: Path, b: Path) -> bool:
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            x, y = fa.read(CHUNK), fb.read(CHUNK)
            if x != y:
                return False
            if not x:
                return True


def compare(source: Path, copy: Path, limit: int = 10) -> list[str]:
    """How ``copy`` differs from ``source``, file by file and byte for byte: files
    missing, files extra, files of other bytes (at most ``limit`` named); empty when
    they hold the same files with the same bytes. Empty directories do not count."""
    if not copy.is_dir():
        return [f"{copy} is not a directory"]
    want, got = files(source), files(copy)
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(p for p in set(want) & set(got)
                    if want[p] != got[p] or not _same_bytes(source / p, copy / p))
    problems = []
    for what, paths in (("missing", missing), ("extra", extra), ("different bytes", differ)):
        if paths:
            shown = ", ".join(paths[:limit]) + (", ..." if len(paths) > limit else "")
            problems.append(f"{len(paths)} {what}: {shown}")
    return problems


def main(argv: list[str]) -> int:
    """``python bench/lib/bulk_tree.py SOURCE COPY``: compare two trees by hand."""
    problems = compare(Path(argv[0]), Path(argv[1]))
    print("\n".join(problems) if problems else "same files, same bytes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
