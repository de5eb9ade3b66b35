"""What counting a request costs the vLLM tier: the store hook (now) against the store
wrappers it replaced (commit 57976e8) and against counting nothing (the hook unset), per
HEAD and per GET, on the tier's real wiring.

    python bench/evidence/hook_vs_wrappers.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 7]

Each round runs one process per checkout, in turn (interleaved), with the vLLM venv's
Python: ``open_tier_io`` on a directory location (no network: what is left is the
Python around each request), a block stored, then N lookups' HEADs through the prober's
store and N GETs into a row through the loader's store. Prints microseconds per request
(median over rounds, min-max) and writes ``hook-vs-wrappers.json`` beside this file.
The tier runs inside vLLM's EngineCore next to the scheduler: this Python holds the GIL.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

N = 20_000
CHILD = r"""
import json, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from s3kv import Namespace, S3Settings, KeyMapper, make_offload_key
try:
    from s3kv.naming.location import parse_location
except ImportError:
    from s3kv.location import parse_location
from s3kv.stores import PutOptions
from s3kv.vllm._metrics import TierMeter
from s3kv.vllm._wiring import open_tier_io
import s3kv
assert s3kv.__file__.startswith(sys.argv[1]), s3kv.__file__
n = int(sys.argv[2])
root = tempfile.mkdtemp()
ns = Namespace(model_name="m", tokens_per_hash=16, dtype="bfloat16", tp_size=1,
               kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])
io = open_tier_io(parse_location(root), ns, S3Settings.resolve(), TierMeter("1:s3kv"),
                  style="s3kv", renew_after=None, announce_removals=False)
key = KeyMapper(ns).key_for(make_offload_key(b"\x01" * 32, 0))
io.store.put(key, b"x" * 4096, PutOptions())
buf = memoryview(bytearray(4096))
if sys.argv[3] == "off":
    io.store.on_request = None  # nothing counted: what the requests cost by themselves
head, get = io.prober.store.head, io.downloader.store.get_into
for _ in range(2000):
    head(key); get(key, buf)
t = time.perf_counter()
for _ in range(n):
    head(key)
h = (time.perf_counter() - t) / n * 1e6
t = time.perf_counter()
for _ in range(n):
    get(key, buf)
g = (time.perf_counter() - t) / n * 1e6
print(json.dumps({"head_us": h, "get_into_us": g, "store": type(io.store).__name__,
                  "prober_store": type(io.prober.store).__name__}))
"""


Variant = tuple[str, str, str]  # name, checkout, "on" (hook set) or "off"


def measure(variants: tuple[Variant, ...], rounds: int) -> dict[str, list[dict[str, float]]]:
    """Interleaved rounds, one child process per variant each round (on a quiet machine)."""
    python = str(Path(os.environ.get("VLLM_PY", ".venv-vllm/bin/python")).absolute())
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for name, repo, mode in variants:
                out = subprocess.run([python, "-c", CHILD, str(Path(repo).resolve()), str(N), mode],
                                     capture_output=True, text=True, cwd=tmp, check=True)
                runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return runs


def summarise(runs: dict[str, list[dict[str, float]]], title: str) -> dict[str, object]:
    """Print the table (median, min-max per request) and return it."""
    table = {}
    print(f"{title:<20} {'HEAD us/request':>22} {'GET us/request':>22}")
    for name, got in runs.items():
        row = {}
        for field in ("head_us", "get_into_us"):
            xs = [r[field] for r in got]
            row[field] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
        table[name] = row
        cells = [f"{row[f]['median']:.1f} ({row[f]['min']:.1f}-{row[f]['max']:.1f})"
                 for f in ("head_us", "get_into_us")]
        print(f"{name:<20} {cells[0]:>22} {cells[1]:>22}")
    return table


def quiet_load() -> float:
    load = os.getloadavg()[0]
    if load >= 1:
        raise SystemExit(f"load average {load:.2f}: wait for a quiet machine (under 1)")
    return load


def main() -> None:
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 7
    load = quiet_load()
    variants = (("wrappers (57976e8)", old, "on"), ("hook", new, "on"), ("no counting", new, "off"))
    runs = measure(variants, rounds)
    table = summarise(runs, "tier wiring")
    result = {"what": __doc__.split("\n\n")[0], "requests_per_run": N, "rounds": rounds,
              "load_average_at_start": load, "store": runs["hook"][0]["store"],
              "results": table, "runs": runs}
    out = Path(__file__).with_name("hook-vs-wrappers.json")
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
