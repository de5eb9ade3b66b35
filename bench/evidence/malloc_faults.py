"""What glibc's malloc settings cost the I/O process in page faults: one allocation of a
GET body's size, freed and made again, on a thread (awscrt hands bodies over on its own).

    .venv-vllm/bin/python bench/evidence/malloc_faults.py    # seconds; writes malloc-faults.json

Each setting runs in a fresh interpreter (glibc reads its ``MALLOC_*_`` variables at
start): on a thread of its own, it makes a ``bytearray`` of the body's size, touches
every page, makes a second one of half that size (another body in flight), frees both,
and does it again; the figure is minor page faults per round over ``ROUNDS`` rounds (the
kernel's own count, ``ru_minflt``: not a timing, so any machine gives the same). A body
whose memory glibc kept faults only a few pages; one it gave back to the kernel faults
every page again, each zeroed by the kernel first.

* ``glibc defaults``: its mmap threshold adapts (up to 32 MiB) and its trim threshold
  with it;
* ``mmap threshold only``: ``MALLOC_MMAP_THRESHOLD_`` at 64 MiB, as the I/O process set
  before ``MALLOC_TRIM_THRESHOLD_``: set by hand, glibc adapts neither, and its trim
  threshold stays at 128 KiB;
* ``the I/O process's``: :data:`s3kv.vllm._io_process.MALLOC_DEFAULTS`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

ROUNDS = 50
SIZES_MIB = (2, 8, 32)
PROBE = """
import resource, sys, threading
n, rounds, out = int(sys.argv[1]) << 20, int(sys.argv[2]), []
def bodies():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(rounds):
        body = bytearray(n)
        body[::4096] = bytes(len(body[::4096]))
        other = bytearray(n // 2)
        del body, other
    out.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / rounds)
thread = threading.Thread(target=bodies)
thread.start()
thread.join()
print(out[0])
"""


def faults_per_body(settings: dict[str, str], mib: int, rounds: int = ROUNDS) -> float:
    """Minor page faults per round for bodies of ``mib`` MiB under ``settings`` (the
    ``MALLOC_*_`` variables; glibc's defaults for the others)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(mib), str(rounds)],
                          env={**env, **settings}, capture_output=True, text=True,
                          check=True)  # fmt: skip
    return float(proc.stdout)


def main() -> int:
    from s3kv.vllm._io_process import MALLOC_DEFAULTS, MMAP_THRESHOLD_BYTES

    settings = {
        "glibc defaults": {},
        "mmap threshold only": {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES)},
        "the I/O process's": dict(MALLOC_DEFAULTS),
    }
    rows = []
    for name, values in settings.items():
        for mib in SIZES_MIB:
            faults = faults_per_body(values, mib)
            rows.append({"settings": name, "env": values, "body_mib": mib,
                         "pages": mib * 256, "faults_per_round": round(faults, 1)})
            print(f"{name:20} {mib:3} MiB  {faults:9.1f} faults a round "
                  f"({mib * 256} pages)")
    doc = {"what": __doc__.split("\n\n")[0], "command": "bench/evidence/malloc_faults.py",
           "rounds": ROUNDS, "python": sys.version.split()[0],
           "glibc": os.confstr("CS_GNU_LIBC_VERSION"), "rows": rows}
    (HERE / "malloc-faults.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
