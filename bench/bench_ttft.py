"""Time to first token of a real vLLM engine on this CPU: S3 hit vs recompute vs fs tier.

    .venv-vllm-engine/bin/python bench/bench_ttft.py                 # moto, RGW, fs, recompute
    .venv-vllm-engine/bin/python bench/bench_ttft.py --no-rgw --rounds 1 --prompts 2

A random-weight Llama built here (bf16, 1024 hidden, 8 layers, GQA 16/4 heads; nothing
downloaded) and prompts of ``--tokens`` random token ids. Every engine life is a fresh
process (tests/e2e/engine.py, with the test-only CPU offload plugin), so a hit can only
come from the secondary tier. First, one writer engine per tier (s3kv on moto's server,
s3kv on Ceph RGW, vLLM's own ``fs`` tier) computes every prompt and stores its KV. Then,
``--rounds`` times, one reader engine per row (recompute: no offloading at all; then each
tier) runs every prompt with ``max_tokens=1``: TTFT is the wall time of that
``generate`` call, lookups and loads included (writers decode 8 tokens: vLLM moves KV
on to a secondary tier only while it steps). Rows are interleaved round by round, and
every reader checks the hit (``num_cached_tokens``) and the first token against recompute.
Prints a table; ``--json`` writes the samples.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.engine import build_model, engine_env, run_engine  # noqa: E402

MODEL = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16,
         "num_key_value_heads": 4, "intermediate_size": 2816, "vocab_size": 4096}


def _bucket(url: str, keys: tuple[str, str]) -> str:
    import boto3

    name = f"s3kv-ttft-{uuid.uuid4().hex[:12]}"
    boto3.session.Session().client(
        "s3", endpoint_url=url, aws_access_key_id=keys[0], aws_secret_access_key=keys[1],
        region_name="us-east-1").create_bucket(Bucket=name)
    return name


def _s3_tier(url: str, keys: tuple[str, str]) -> dict[str, Any]:
    return {"type": "S3TierManager", "module_path": "s3kv.vllm",
            "url": f"s3://{_bucket(url, keys)}/kv", "endpoint_url": url,
            "access_key_id": keys[0], "secret_access_key": keys[1]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=3072, help="prompt length (default 3072)")
    p.add_argument("--prompts", type=int, default=3, help="prompts per engine (default 3)")
    p.add_argument("--rounds", type=int, default=2, help="reader rounds (default 2)")
    p.add_argument("--chunk-tokens", type=int, default=256, help="tokens per stored object")
    p.add_argument("--no-rgw", action="store_true", help="skip Ceph RGW")
    p.add_argument("--json", type=Path, default=None, help="write the samples here")
    p.add_argument("--workdir", type=Path, default=None, help="keep the model here")
    args = p.parse_args(argv)

    rng = random.Random(7)
    prompts = [[rng.randrange(3, MODEL["vocab_size"]) for _ in range(args.tokens)]
               for _ in range(args.prompts)]
    with ExitStack() as stack:
        work = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        model = build_model(work / "ttft-llama", dtype="bfloat16", **MODEL)
        from s3kv.demo import embedded_s3

        tiers: dict[str, dict[str, Any] | None] = {"recompute": None}
        moto = stack.enter_context(embedded_s3())
        tiers["s3kv, moto server"] = _s3_tier(moto, ("testing", "testing"))
        if not args.no_rgw:
            from tests.servers.rgw import RGWServer

            rgw = stack.enter_context(RGWServer())
            tiers["s3kv, Ceph RGW"] = _s3_tier(rgw.http_endpoint,
                                               (rgw.access_key, rgw.secret_key))
        fs_root = work / "fs-tier"
        shutil.rmtree(fs_root, ignore_errors=True)
        tiers["vLLM fs tier"] = {"type": "fs", "root_dir": str(fs_root)}

        def engine(name: str, tier: dict[str, Any] | None, max_tokens: int,
                   ) -> list[dict[str, Any]]:
            job = {"model": str(model), "dtype": "bfloat16", "prompts": prompts,
                   "max_tokens": max_tokens, "max_model_len": args.tokens + 64,
                   "block_size": args.chunk_tokens, "cpu_bytes_to_use": 256 << 20,
                   "secondary_tiers": [tier] if tier else None, "settle_seconds": 3.0}
            env = engine_env(work / "run", multiprocess=False, extra={"S3KV_TRACE_FILE": ""})
            out = run_engine(job, env=env, timeout=3600)
            results: list[dict[str, Any]] = out["results"]
            print(f"  {name}: " + ", ".join(f"{r['seconds']:.2f}s/{r['num_cached_tokens']}"
                                            for r in results)
                  + f" (engine life {out['wall_seconds']:.0f}s, {out['cpu_seconds']:.0f}s CPU)",
                  flush=True)
            return results

        print(f"model {MODEL}, {args.prompts} prompts of {args.tokens} tokens", flush=True)
        samples: dict[str, list[float]] = {name: [] for name in tiers}
        writes: dict[str, list[float]] = {}
        for name, tier in tiers.items():
            if tier is not None:
                print(f"writer {name}", flush=True)
                # Decode steps after the prefill: vLLM moves KV on to a secondary tier
                # only while it steps, so a prompt that ends at its prefill, last before
                # the shutdown, would never reach the tier.
                writes[name] = [r["seconds"] for r in engine(name, tier, 8)]
        first: list[int] | None = None
        for rnd in range(args.rounds):
            for name, tier in tiers.items():
                print(f"round {rnd + 1} {name}", flush=True)
                results = engine(name, tier, 1)
                want = 0 if tier is None else args.tokens // args.chunk_tokens * args.chunk_tokens
                for r in results:
                    if r["num_cached_tokens"] < want:
                        raise SystemExit(f"{name}: {r['num_cached_tokens']} cached, not {want}")
                firsts = [r["tokens"][0] for r in results]
                if first is None:
                    first = firsts
                elif firsts != first:
                    print(f"  note: {name} first tokens {firsts} != recompute {first}")
                samples[name].extend(r["seconds"] for r in results)

    base = statistics.median(samples["recompute"])
    print(f"\nTTFT, {args.tokens}-token prompt, {len(samples['recompute'])} samples per row")
    print(f"| {'how the prompt KV is had':<34} | {'median s':>8} | {'min s':>6} | "
          f"{'max s':>6} | {'vs recompute':>12} |")
    print(f"|{'-' * 36}|{'-' * 9}:|{'-' * 7}:|{'-' * 7}:|{'-' * 13}:|")
    for name, values in samples.items():
        med = statistics.median(values)
        label = "recompute (no offloading)" if name == "recompute" else f"hit: {name}"
        print(f"| {label:<34} | {med:8.2f} | {min(values):6.2f} | {max(values):6.2f} | "
              f"{base / med:11.1f}x |")
    for name, values in writes.items():
        label = f"writer, 8 tokens: {name}"  # a miss: prefill, decode, store
        print(f"| {label:<34} | {statistics.median(values):8.2f} | "
              f"{min(values):6.2f} | {max(values):6.2f} | {'':>12} |")
    if args.json:
        args.json.write_text(json.dumps({"model": MODEL, "tokens": args.tokens,
                                         "chunk_tokens": args.chunk_tokens,
                                         "hits": samples, "miss_and_store": writes}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
