"""FIXTURES: made-up benchmark documents for the tests of bench/; not measurements."""

from __future__ import annotations

from typing import Any

FIXTURE = "made-up numbers for tests; not a measurement"


def trust(loaded: bool) -> dict[str, Any]:
    return {"load_average_1m": 3.5 if loaded else 0.2, "loaded": loaded, "load_limit": 1.0,
            "spread_limit": 0.2}


def prompt_load(loaded: bool = False) -> dict[str, Any]:
    """bench_prompt_load.py's JSON shape, two links, two prompts, two block sizes."""
    def row(link: str, who: str, kind: str, prompt: int, block_tokens: int, load: float,
            ) -> dict[str, Any]:
        out = {"link": link, "prompt_tokens": prompt, "block_tokens": block_tokens,
               "block_bytes": block_tokens << 17, "blocks": prompt // block_tokens,
               "who": who, "kind": kind, "rounds": 3, "load_s": load,
               "load_s_min": load * 0.9, "load_s_max": load * 1.2,
               "load_s_runs": [load * 0.9, load, load * 1.2], "load_cpu_s_per_gib": 1.0,
               "disagree": []}
        if kind == "tier":
            out.update(store_s=2 * load, store_s_min=2 * load, store_s_max=2 * load,
                       store_mib_s=prompt * 128 / 1024 / (2 * load),
                       store_cpu_s_per_gib=1.5,
                       calls_us={c: {"n": 3, "p50": 10.0, "p99": 20.0, "max": 30.0}
                                 for c in ("lookup", "submit_store", "submit_load",
                                           "get_finished_jobs")})
        return out

    rows = []
    for link in ("rgw-http", "aws-like"):
        for prompt in (3072, 8192):
            for block in (16, 256):
                rows += [row(link, "s3kv", "tier", prompt, block, 1.0),
                         row(link, "vllm-obj", "tier", prompt, block, 2.0),
                         row(link, "awscrt GETs (s3kv's settings)", "ceiling", prompt, block,
                             0.8),
                         row(link, "memcpy", "ceiling", prompt, block, 0.1)]
    return {"fixture": FIXTURE,
            "meta": {"threads": 16, "rounds": 3, "machine": "fixture", "command": "fixture",
                     "links": {"aws-like": {"first_byte_ms": 100.0, "connection_mb_s": 85.0}}},
            "loaded": loaded, "trust": trust(loaded), "rows": rows}


def ttft(loaded: bool = False) -> dict[str, Any]:
    """bench_ttft.py's JSON shape."""
    rows = [{"row": name, "label": label, "ttft_s": t, "ttft_s_min": t * 0.9,
             "ttft_s_max": t * 1.1, "ttft_s_runs": [[t]], "vs_recompute": 2.0 / t,
             "disagree": []}
            for name, label, t in (("recompute", "recompute (no offloading)", 2.0),
                                   ("s3kv, Ceph RGW", "S3 hit: s3kv, Ceph RGW", 0.5),
                                   ("vLLM fs tier", "disk hit: vLLM fs tier", 0.25))]
    return {"fixture": FIXTURE,
            "meta": {"command": "fixture", "tokens": 3072, "chunk_tokens": 256,
                     "object_bytes": 2 << 20, "prompts": 3, "rounds": 3, "vllm": "0.32.0",
                     "parameters": "93 M parameters", "machine": "fixture"},
            "loaded": loaded, "trust": trust(loaded), "rows": rows, "writers": []}
