"""One benchmark row in its own process: ``python bench/_workers.py '<json spec>'``.

Run by ``bench/bench_transfer.py``; prints one JSON line (the last line of stdout).
Setup (imports, clients, payloads) happens before the timed region; the timed region
measures wall time and this process's own CPU (``getrusage(RUSAGE_SELF)``: user + sys of
every thread, native ones included).

The rows live by operation: ``_upload``, ``_download``, ``_lookup``; the clients in
``_clients`` and the payloads and keys in ``_blocks``. Their names are re-exported here.
"""

from __future__ import annotations

import json
import resource
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from _blocks import MODEL, namespace, object_keys, offload_keys, payload, sample_indices
from _clients import (
    CHECKED_TAGGING,
    CLIENTS,
    Crt,
    boto3_client,
    crc32c_b64,
    obstore_store,
    run_window,
    s3kv_settings,
)
from _download import prepare_download
from _lookup import populate, prepare_lookup
from _upload import prepare_upload

__all__ = [
    "CHECKED_TAGGING",
    "CLIENTS",
    "MODEL",
    "Crt",
    "boto3_client",
    "cpu_seconds",
    "crc32c_b64",
    "namespace",
    "object_keys",
    "obstore_store",
    "offload_keys",
    "payload",
    "populate",
    "prepare_download",
    "prepare_lookup",
    "prepare_upload",
    "run_window",
    "s3kv_settings",
    "sample_indices",
    "timed",
]


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
