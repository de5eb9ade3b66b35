"""Keys per second: s3kv's KeyMapper and parse_key beside vLLM's FileMapper.get_file_name.

    python bench/bench_keys.py [--keys 200000] [--repeat 5]

vLLM's FileMapper is taken from an installed vllm==0.33.0 when importable (make
vllm-venv), else from ../shared/reference/vllm_file_mapper.py.txt (vLLM's file, its two
vLLM imports stubbed). Each row is the best of --repeat runs, measured side by side.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from s3kv import KeyMapper, Namespace, parse_key

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared/reference/vllm_file_mapper.py.txt"
ARGS = dict(
    model_name="meta-llama/Llama-3.1-8B-Instruct",
    tokens_per_hash=16,
    blocks_per_file=1,
    tp_size=1,
    pp_size=1,
    pcp_size=1,
    dcp_size=1,
    rank=0,
    dtype="bfloat16",
)


def load_vllm_file_mapper() -> tuple[Any, str]:
    try:
        from vllm.v1.kv_offload.file_mapper import FileMapper

        return FileMapper, "vllm (installed)"
    except ImportError:
        pass
    if not REFERENCE.exists():
        return None, "unavailable"
    stub = types.ModuleType("stub")
    stub.canonical_format_id = lambda layout: f"v1-{layout}"  # type: ignore[attr-defined]
    stub.OffloadingSpec = object  # type: ignore[attr-defined]
    stub.OffloadKey = bytes  # type: ignore[attr-defined]
    stub.get_offload_block_hash = lambda k: k[:-4]  # type: ignore[attr-defined]
    stub.get_offload_group_idx = lambda k: int.from_bytes(k[-4:], "big")  # type: ignore[attr-defined]
    for name in (
        "vllm",
        "vllm.distributed",
        "vllm.distributed.kv_transfer",
        "vllm.distributed.kv_transfer.kv_connector",
        "vllm.distributed.kv_transfer.kv_connector.v1",
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading",
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading.canonical_mapping",
        "vllm.v1",
        "vllm.v1.kv_offload",
        "vllm.v1.kv_offload.base",
    ):
        sys.modules.setdefault(name, stub)
    source = REFERENCE.read_text().split("\n", 1)[1]  # first line is the file's path
    module: dict[str, Any] = {"__name__": "vllm_file_mapper"}
    exec(compile(source, str(REFERENCE), "exec"), module)
    return module["FileMapper"], "vllm 0.33.0 source (shared/reference)"


def best_rate(fn: Callable[[], object], count: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return count / best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    n = opts.keys
    keys = [os.urandom(32) + (i % 3).to_bytes(4, "big") for i in range(n)]
    ns = Namespace(**ARGS)
    mapper = KeyMapper(ns, prefix="team/kv")
    names = mapper.keys_for(keys)
    rows: list[tuple[str, float]] = []
    FileMapper, source = load_vllm_file_mapper()
    if FileMapper is not None:
        fm = FileMapper(root_dir="team/kv", **ARGS)
        assert [fm.get_file_name(k) for k in keys[:1000]] == names[:1000], "keys differ from vLLM"
        get = fm.get_file_name
        rows.append(
            (
                f"vLLM FileMapper.get_file_name [{source}]",
                best_rate(lambda: [get(k) for k in keys], n, opts.repeat),
            )
        )
    key_for = mapper.key_for
    rows.append(
        ("s3kv KeyMapper.key_for", best_rate(lambda: [key_for(k) for k in keys], n, opts.repeat))
    )
    rows.append(
        (
            "s3kv KeyMapper.keys_for (batch)",
            best_rate(lambda: mapper.keys_for(keys), n, opts.repeat),
        )
    )
    rows.append(
        ("s3kv parse_key", best_rate(lambda: [parse_key(k) for k in names], n, opts.repeat))
    )
    base = rows[0][1] if FileMapper is not None else None
    print(f"{n:,} keys of 32-byte hashes, best of {opts.repeat}; python {sys.version.split()[0]}")
    print(f"| {'operation':<60} | {'keys/s':>12} | {'vs vLLM':>8} |")
    print(f"|{'-' * 62}|{'-' * 14}|{'-' * 10}|")
    for name, rate in rows:
        ratio = f"{rate / base:.2f}x" if base else "n/a"
        print(f"| {name:<60} | {rate:>12,.0f} | {ratio:>8} |")


if __name__ == "__main__":
    main()
