"""Write a cache with vLLM's own filesystem tier, for bench/bench_bulk.py (run in .venv-vllm).

    .venv-vllm/bin/python bench/lib/bulk_vllm_writer.py ROOT BLOCK_BYTES BLOCKS SEED

vLLM 0.33.0's ``FileSystemTierManager``, built by its ``SecondaryTierFactory`` as
tests/vllm/harness.py builds it, stores ``BLOCKS`` blocks of ``BLOCK_BYTES`` random bytes
under ``ROOT`` (its ``FileMapper`` names the files and writes ``config.json``): exactly
what a node's disk cache holds. The rows are refilled and stored a batch at a time, so a
cache larger than memory needs no more than ``BATCH_BYTES`` of it. Prints one JSON line:
the writer and vLLM's version.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.vllm from this checkout

BATCH_BYTES = 64 << 20
"""Rows of the stand-in primary tier: blocks stored per job at most this many bytes."""


def write(root: Path, block_bytes: int, blocks: int, seed: int) -> dict[str, str]:
    import vllm

    from tests.vllm import harness as h

    batch = max(1, min(blocks, BATCH_BYTES // block_bytes))
    spec = h.spec(row_bytes=block_bytes, chunks=batch)
    view, array = h.primary_view(batch, block_bytes)
    tier = h.fs_tier(view, spec, str(root))
    try:
        for start in range(0, blocks, batch):
            n = min(batch, blocks - start)
            h.fill(array, range(n), seed=seed * 1_000_003 + start)
            keys = h.keys(n, start=seed * 1_000_003 + start)
            result = h.run(tier, h.job(keys, range(n), load=False))
            if not result.success:
                raise SystemExit(f"vLLM's fs tier failed to store blocks {start}-{start + n}")
    finally:
        tier.shutdown()
    return {"writer": "vllm-fs-tier", "vllm": vllm.__version__}


def main(argv: list[str]) -> int:
    root, block_bytes, blocks, seed = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    print(json.dumps(write(root, block_bytes, blocks, seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
