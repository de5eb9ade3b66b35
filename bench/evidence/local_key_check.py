"""What a directory's request costs before and after LocalStore.path_for's key check was
rewritten (a regular expression and three membership tests instead of a generator over
every character), on the vLLM tier's real wiring, counted (the hook set) and not.

    python bench/evidence/local_key_check.py BEFORE_CHECKOUT AFTER_CHECKOUT [--rounds 7]

Same child as hook_vs_wrappers.py (``open_tier_io`` on a directory, N HEADs through the
prober's store, N GETs into a row), one process per variant, interleaved rounds. Prints
microseconds per request (median over rounds, min-max) and writes
``local-key-check.json`` beside this file.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from hook_vs_wrappers import CHILD, N


def main() -> None:
    before, after = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 7
    python = str(Path(os.environ.get("VLLM_PY", ".venv-vllm/bin/python")).absolute())
    load = os.getloadavg()[0]
    if load >= 1:
        raise SystemExit(f"load average {load:.2f}: wait for a quiet machine (under 1)")
    variants = (("before, counted", before, "on"), ("after, counted", after, "on"),
                ("before, not counted", before, "off"), ("after, not counted", after, "off"))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for name, repo, mode in variants:
                out = subprocess.run([python, "-c", CHILD, str(Path(repo).resolve()), str(N), mode],
                                     capture_output=True, text=True, cwd=tmp, check=True)
                runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    table = {}
    print(f"{'directory request':<20} {'HEAD us/request':>22} {'GET us/request':>22}")
    for name, got in runs.items():
        row = {}
        for field in ("head_us", "get_into_us"):
            xs = [r[field] for r in got]
            row[field] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
        table[name] = row
        cells = [f"{row[f]['median']:.1f} ({row[f]['min']:.1f}-{row[f]['max']:.1f})"
                 for f in ("head_us", "get_into_us")]
        print(f"{name:<20} {cells[0]:>22} {cells[1]:>22}")
    result = {"what": __doc__.split("\n\n")[0], "requests_per_run": N, "rounds": rounds,
              "load_average_at_start": load, "results": table, "runs": runs}
    Path(__file__).with_name("local-key-check.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
