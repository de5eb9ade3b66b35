"""One benchmark row in its own process: ``python bench/lib/workers.py '<json spec>'``.

Run by ``bench/bench_transfer.py``; prints one JSON line (the last line of stdout).
Setup (imports, clients, payloads) happens before the timed region; the timed region
measures wall time and this process's own CPU (``getrusage(RUSAGE_SELF)``: user + sys of
every thread, native ones included).

The rows live by operation: ``upload``, ``download``, ``lookup``; the clients in
``clients`` and the payloads and keys in ``blocks`` (all in bench/lib).
"""

from __future__ import annotations

import json
import resource
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run by path (``python bench/lib/workers.py``): its own folder comes off the path and the
# repository's root goes last, so ``bench.lib`` is found and ``s3kv`` stays whichever the
# runner's PYTHONPATH or the installed package gives.
if not __package__:
    sys.path[0:1] = []
    sys.path.append(str(Path(__file__).resolve().parents[2]))

from bench.lib.blocks import payload, sample_indices
from bench.lib.download import prepare_download
from bench.lib.lookup import populate, prepare_lookup
from bench.lib.upload import prepare_upload


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def timed(action: Callable[[], dict[str, Any]], profile: str | None) -> dict[str, Any]:
    profilers: list[Any] = []
    if profile:
        import cProfile
        import threading

        def start_in_thread(*_: Any) -> None:  # profile every thread started from now on
            p = cProfile.Profile()
            profilers.append(p)
            sys.setprofile(None)
            p.enable()

        threading.setprofile(start_in_thread)
        main = cProfile.Profile()
        profilers.append(main)
        main.enable()
    c0, t0 = cpu_seconds(), time.perf_counter()
    result = action()
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    if profile:
        import pstats
        import threading

        threading.setprofile(None)
        main.disable()
        stats = pstats.Stats(profilers[0])
        for p in profilers[1:]:
            p.create_stats()
            stats.add(p)
        stats.dump_stats(profile)
    result.update(seconds=seconds, cpu=cpu)
    return result


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        if spec["op"] == "populate":
            print(json.dumps(populate(spec)))
            return
        if spec["op"] == "upload":
            result = timed(prepare_upload(spec), spec.get("profile"))
        elif spec["op"] == "download":
            action, received = prepare_download(spec)
            result = timed(action, spec.get("profile"))
            got = received()
            bad = [
                i
                for i in sample_indices(spec["count"], spec["samples"])
                if got[i] is None or bytes(got[i]) != payload(spec["seed"], i, spec["size"])
            ]
            result["verified"] = len(sample_indices(spec["count"], spec["samples"])) - len(bad)
            result["mismatched"] = len(bad)
        elif spec["op"] == "lookup":
            result = timed(prepare_lookup(spec), spec.get("profile"))
        else:
            raise SystemExit(f"unknown op {spec['op']!r}")
    except Exception as exc:  # report, never hang the driver
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
