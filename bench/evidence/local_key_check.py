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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from hook_vs_wrappers import N, measure, quiet_load, summarise


def main() -> None:
    before, after = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 7
    load = quiet_load()
    variants = (("before, counted", before, "on"), ("after, counted", after, "on"),
                ("before, not counted", before, "off"), ("after, not counted", after, "off"))
    runs = measure(variants, rounds)
    table = summarise(runs, "directory request")
    result = {"what": __doc__.split("\n\n")[0], "requests_per_run": N, "rounds": rounds,
              "load_average_at_start": load, "results": table, "runs": runs}
    Path(__file__).with_name("local-key-check.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
