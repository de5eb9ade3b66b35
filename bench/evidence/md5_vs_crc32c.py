"""MD5 (a PUT answer's check on stores that echo no checksum) beside CRC32C (s3kv's block
checksum, taken on every PUT), on one core: MiB/s over interleaved rounds.

    python bench/evidence/md5_vs_crc32c.py > bench/evidence/md5-vs-crc32c.json

Run it alone on a quiet machine (load average under 1).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

from awscrt import checksums

SIZES = {"64KiB": 64 * 1024, "2MiB": 2 * 1024 * 1024, "8MiB": 8 * 1024 * 1024}
FUNCTIONS: dict[str, Callable[[bytes], object]] = {
    "md5": lambda b: hashlib.md5(b, usedforsecurity=False).hexdigest(),
    "crc32c": checksums.crc32c,
}
ROUNDS = 7
BYTES_PER_ROUND = 256 * 1024 * 1024


def main() -> None:
    data = {name: os.urandom(size) for name, size in SIZES.items()}
    rates: dict[str, list[float]] = {f"{f}/{s}": [] for f in FUNCTIONS for s in SIZES}
    load = os.getloadavg()[0]
    for _ in range(ROUNDS):
        for size, buf in data.items():
            for name, function in FUNCTIONS.items():
                n = BYTES_PER_ROUND // len(buf)
                started = time.perf_counter()
                for _ in range(n):
                    function(buf)
                took = time.perf_counter() - started
                rates[f"{name}/{size}"].append(n * len(buf) / took / 2**20)
    mib = {
        k: {"median": round(statistics.median(v), 1), "min": round(min(v), 1),
            "max": round(max(v), 1)}
        for k, v in rates.items()
    }  # fmt: skip
    json.dump({
        "what": (__doc__ or "").split("\n\n")[0],
        "command": "python bench/evidence/md5_vs_crc32c.py",
        "load_average_at_start": round(load, 2),
        "rounds": ROUNDS,
        "bytes_per_round": BYTES_PER_ROUND,
        "mib_per_s": mib,
        "seconds_per_gib": {k: round(1024 / v["median"], 3) for k, v in mib.items()},
    }, sys.stdout, indent=1)  # fmt: skip
    print()


if __name__ == "__main__":
    main()
