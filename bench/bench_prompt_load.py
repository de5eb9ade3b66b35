"""Time to load one prompt's KV from S3: s3kv's tier, vLLM's obj tier, and the ceilings.

    .venv-vllm/bin/python bench/bench_prompt_load.py            # everything, ~30 min quiet
    .venv-vllm/bin/python bench/bench_prompt_load.py --links rgw-http --prompts 3072 \\
        --block-tokens 16 --rounds 1 --json /tmp/p.json --force-loaded   # a smoke run
    .venv/bin/python bench/bench_prompt_load.py --redraw docs/img/prompt-load.json
    .venv/bin/python bench/bench_prompt_load.py --table docs/img/prompt-load.json

What a user feels on a prefix hit is how long one prompt's KV takes to come back: vLLM
asks a tier for it as ONE load job of all the prompt's blocks. For prompts of
``--prompts`` tokens at ``--block-tokens`` tokens per block of Llama-3.1-8B's KV (128
KiB per token: 16, 64 and 256 tokens make objects of 2, 8 and 32 MiB), this times that
job for s3kv's tier and vLLM 0.33.0's obj tier (NIXL), both built by vLLM's
``SecondaryTierFactory`` with a real ``TieringOffloadingSpec`` and ``--threads`` I/O
threads, and one store job of the prompt (throughput), with the client's CPU per GiB
and the scheduler-side call times (lookup, submit_store, submit_load,
get_finished_jobs). Loads are checked byte for byte. Rounds are interleaved (tier order
alternates; a warm-up round is not counted); tables give medians with min-max.

``--tiers`` adds ``s3kv-16`` (s3kv's tier at the obj tier's connections) and
``s3kv-sse-c`` (s3kv's tier with a key per tenant, SSE-C, docs/tenants.md: TLS links
only): ``--tiers s3kv,s3kv-sse-c --links rgw-https,aws-like-tls`` measures what
encryption at rest costs loads and stores (the "encryption" table).

The ceilings (``--ceilings``): ``crt`` is bare awscrt GETs of the same objects into the
same rows with s3kv's settings (bench/lib/ceiling.py); ``crt:PART_MIB:CONNECTIONS`` other
settings; ``memcpy`` a numpy copy of the prompt's bytes.

Links (``--links``, bench/lib/links.py): Ceph RGW 16 on loopback over HTTP and TLS, and
``aws-like``: RGW behind bench/lib/latency_proxy.py with ``--first-byte-ms`` of latency per
request and ``--connection-mb-s`` per connection (defaults from published S3 figures,
cited there); the proxy's per-method counts show both tiers' requests go through it.

As vLLM's EngineCore does once its scheduler exists, the heap is frozen
(``freeze_gc_heap()``) after the tiers are built. It refuses to run on a loaded machine
(bench/lib/trust.py). Results go to ``--json`` and, where matplotlib is installed (the
``bench`` extra, .venv), the chart to ``--chart``; in .venv-vllm draw it afterwards
with ``--redraw``.

``--loop-work-ms 0`` leaves the stand-in scheduler's Python work out of each step (it
only waits and polls): a run with it and one without say how much of a tier's load time
is the CPU that the scheduler's steps take on this 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # s3kv, bench.lib and scripts from this checkout

from bench.lib import engine_loop, results  # noqa: E402
from bench.lib import prompt_report as report  # noqa: E402
from bench.lib import trust as _trust  # noqa: E402
from bench.lib.latency_proxy import S3_CONNECTION_BYTES_PER_SECOND, S3_FIRST_BYTE_SECONDS  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
LLAMA_3_1_8B_KV_BYTES_PER_TOKEN = 128 * KiB
"""32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes (bfloat16)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--links", default="rgw-http,rgw-https,aws-like,aws-like-tls",
                   help="rgw-http, rgw-https, aws-like, aws-like-tls (comma-separated)")
    p.add_argument("--prompts", default="3072,8192", help="prompt lengths in tokens")
    p.add_argument("--block-tokens", default="16,64,256", help="tokens per block (object)")
    p.add_argument("--kv-bytes-per-token", type=int, default=LLAMA_3_1_8B_KV_BYTES_PER_TOKEN,
                   help="KV bytes per token (default Llama-3.1-8B's, 131072)")
    p.add_argument("--tiers", default="s3kv,vllm-obj",  # s3kv-16, s3kv-sse-c: see the doc
                   help="s3kv, vllm-obj, s3kv-16 (s3kv at the obj tier's connections), "
                   "s3kv-sse-c (s3kv with a key per tenant; TLS links only)")
    p.add_argument("--ceilings", default="crt,memcpy",
                   help="crt (s3kv's awscrt settings), crt:PART_MIB:CONNECTIONS, memcpy")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians)")
    p.add_argument("--warmup", type=int, default=1, help="uncounted rounds first")
    p.add_argument("--threads", type=int, default=16, help="I/O threads of each tier")
    p.add_argument("--first-byte-ms", type=float, default=S3_FIRST_BYTE_SECONDS * 1000,
                   help="aws-like: latency added to every request (default %(default)g, AWS's "
                        "published first-byte latency for larger objects, low end)")
    p.add_argument("--connection-mb-s", type=float, default=S3_CONNECTION_BYTES_PER_SECOND / 1e6,
                   help="aws-like: rate cap per connection and direction, MB/s (default "
                        "%(default)g, one S3 GET stream; 0: no cap)")
    p.add_argument("--no-freeze", action="store_true", help="skip vLLM's freeze_gc_heap()")
    p.add_argument("--loop-work-ms", type=float, default=engine_loop.WORK_SECONDS * 1000,
                   help="the stand-in scheduler's Python work per step, in ms (default "
                        "%(default)s; 0: its steps only wait and poll the tier, so loads "
                        "do not share the CPU with scheduler work)")
    p.add_argument("--json", type=Path, default=ROOT / "docs/img/prompt-load.json")
    p.add_argument("--chart", type=Path, default=ROOT / "docs/img/prompt-load.png")
    p.add_argument("--redraw", type=Path, metavar="JSON", help="only draw --chart from a JSON")
    p.add_argument("--table", type=Path, metavar="JSON", help="only print a JSON's tables")
    _trust.add_arguments(p)
    args = p.parse_args(argv)
    args.links = [x for x in args.links.split(",") if x]
    args.prompts = [int(x) for x in args.prompts.split(",")]
    args.block_tokens = [int(x) for x in args.block_tokens.split(",")]
    args.tiers = [x for x in args.tiers.split(",") if x]
    args.ceilings = [x for x in args.ceilings.split(",") if x]
    for prompt in args.prompts:
        for tokens in args.block_tokens:
            if prompt % tokens:
                p.error(f"a {prompt}-token prompt is not a whole number of {tokens}-token "
                        "blocks; pick prompt lengths that are multiples of --block-tokens")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.loop_work_ms < 0:
        p.error("--loop-work-ms is a time per step: 0 or more")
    plain = [link for link in args.links if link in ("rgw-http", "aws-like")]
    if "s3kv-sse-c" in args.tiers and plain:
        # refused before RGW starts: nothing to stop, no directory left behind
        raise SystemExit(f"--tiers s3kv-sse-c: customer keys need TLS (RGW refuses them "
                         f"over HTTP), and {', '.join(plain)} is plain HTTP: "
                         "--links rgw-https,aws-like-tls")
    return args


def tables(doc: dict[str, Any]) -> str:
    found = [report.loads(doc), report.stores(doc), report.cpu(doc), report.loop(doc),
             report.equal_footing(doc), report.encryption(doc), report.calls(doc)]
    return "\n\n".join(t for t in found if t)


def run(args: argparse.Namespace, trust: dict[str, Any]) -> dict[str, Any]:
    from bench.lib.links import links
    from bench.lib.prompt_run import Case

    engine_loop.set_work(args.loop_work_ms / 1000)
    os.environ.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1"})
    os.environ.pop("AWS_PROFILE", None)
    biggest = max(args.prompts) * args.kv_bytes_per_token
    rows: list[dict[str, Any]] = []
    settings: dict[str, Any] = {}
    proxy_cpu: dict[str, float] = {}
    # One prompt per tier may be stored before a round deletes them, and RGW collects
    # deleted tails later, not always before the next round: 2 x the biggest prompt filled
    # the in-memory OSD at 8,192 tokens, and 4 x at 3,072 by the fourth link.
    memstore = max((len(args.tiers) + 1) * biggest + GiB, 8 * GiB)
    with links(args.links, memstore_bytes=memstore,
               first_byte_seconds=args.first_byte_ms / 1000,
               connection_bytes_per_second=args.connection_mb_s * 1e6 or None) as found:
        for name in args.links:
            link = found[name]
            settings[name] = link.settings
            cpu0 = link.proxy.cpu_seconds() if link.proxy else 0.0
            for prompt in args.prompts:
                for tokens in args.block_tokens:
                    t0 = time.monotonic()
                    case = Case(link, prompt_tokens=prompt, block_tokens=tokens,
                                kv_bytes_per_token=args.kv_bytes_per_token,
                                threads=args.threads, tiers=args.tiers, ceilings=args.ceilings)
                    try:
                        if not args.no_freeze:
                            from vllm.utils.gc_utils import freeze_gc_heap

                            freeze_gc_heap()
                        for r in range(-args.warmup, args.rounds):
                            if r == 0:
                                case.reset()
                            case.round(r)
                        done = case.rows_out()
                    finally:
                        case.close()
                    rows += done
                    print(f"{name} {prompt} tokens, {tokens} per block: "
                          f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
                    print(report.loads({"rows": done, **_trust.stamp({}, trust)}), flush=True)
            if link.proxy:
                proxy_cpu[name] = round(link.proxy.cpu_seconds() - cpu0, 2)

    meta = {
        "command": "bench/bench_prompt_load.py " + " ".join(sys.argv[1:]),
        "prompts": args.prompts, "block_tokens": args.block_tokens,
        "kv_bytes_per_token": args.kv_bytes_per_token, "rounds": args.rounds,
        "warmup": args.warmup, "threads": args.threads, "gc_freeze": not args.no_freeze,
        "loop_work_ms": args.loop_work_ms,
        "tiers": args.tiers, "ceilings": args.ceilings, "links": settings,
        "proxy_cpu_seconds": proxy_cpu, "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "versions": _trust.versions("vllm", "nixl", "s3kv", "awscrt"),
        "machine": _trust.machine(shared=trust["loaded"]),
    }
    return _trust.stamp({"meta": meta, "rows": rows}, trust)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if results.from_saved(args, tables, report.chart):
        return 0
    trust = _trust.gate(args)
    doc = run(args, trust)
    print(tables(doc))
    print(f"wrote {results.write(doc, args.json)}")
    results.draw(report.chart, doc, args.chart, script="bench/bench_prompt_load.py",
                 saved=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
