"""Keys per second: s3kv's KeyMapper and parse_key beside vLLM's FileMapper.get_file_name.

    python bench/bench_keys.py [--keys 200000] [--repeat 5] [--json F.json] [--chart F.png]
    python bench/bench_keys.py --table docs/img/keys.json

vLLM's FileMapper is taken from an installed vllm==0.33.0 when importable (make
vllm-venv), else from the nearest shared/reference/vllm_file_mapper.py.txt up (vLLM's file, its two
vLLM imports stubbed). Each row is the median of --repeat interleaved rounds (the order
of the operations alternates); it refuses to run on a loaded machine (bench/lib/trust.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # s3kv, bench.lib, scripts

from bench.lib import results
from bench.lib import trust as _trust
from s3kv import KeyMapper, Namespace, parse_key

# shared/ sits beside the repository (or above a worktree of it): the nearest one up.
REFERENCE = next(
    (
        p / "shared/reference/vllm_file_mapper.py.txt"
        for p in Path(__file__).resolve().parents
        if (p / "shared/reference/vllm_file_mapper.py.txt").exists()
    ),
    Path(__file__).resolve().parents[2] / "shared/reference/vllm_file_mapper.py.txt",
)
ARGS = dict(
    model_name="meta-llama/Llama-3.1-8B-Instruct",
    tokens_per_hash=16,
    blocks_per_file=1,
    tp_size=1,
    pp_size=1,
    pcp_size=1,
    dcp_size=1,
    rank=0,
    dtype="bfloat16",
)


def load_vllm_file_mapper() -> tuple[Any, str]:
    try:
        from vllm.v1.kv_offload.file_mapper import FileMapper

        return FileMapper, "vllm (installed)"
    except ImportError:
        pass
    if not REFERENCE.exists():
        return None, "unavailable"
    stub = types.ModuleType("stub")
    stub.canonical_format_id = lambda layout: f"v1-{layout}"  # type: ignore[attr-defined]
    stub.OffloadingSpec = object  # type: ignore[attr-defined]
    stub.OffloadKey = bytes  # type: ignore[attr-defined]
    stub.get_offload_block_hash = lambda k: k[:-4]  # type: ignore[attr-defined]
    stub.get_offload_group_idx = lambda k: int.from_bytes(k[-4:], "big")  # type: ignore[attr-defined]
    for name in (
        "vllm",
        "vllm.distributed",
        "vllm.distributed.kv_transfer",
        "vllm.distributed.kv_transfer.kv_connector",
        "vllm.distributed.kv_transfer.kv_connector.v1",
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading",
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading.canonical_mapping",
        "vllm.v1",
        "vllm.v1.kv_offload",
        "vllm.v1.kv_offload.base",
    ):
        sys.modules.setdefault(name, stub)
    source = REFERENCE.read_text().split("\n", 1)[1]  # first line is the file's path
    module: dict[str, Any] = {"__name__": "vllm_file_mapper"}
    exec(compile(source, str(REFERENCE), "exec"), module)
    return module["FileMapper"], "vllm 0.33.0 source (shared/reference)"


def rate(fn: Callable[[], object], count: int) -> float:
    t0 = time.perf_counter()
    fn()
    return count / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds (median)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--chart", help="draw keys/s per operation here (PNG)")
    parser.add_argument("--redraw", metavar="JSON", help="only draw --chart from a saved --json")
    parser.add_argument("--table", metavar="JSON", help="only print a saved --json's table")
    _trust.add_arguments(parser)
    opts = parser.parse_args(argv)
    if results.from_saved(opts, markdown, chart):
        return
    trust = _trust.gate(opts)
    n = opts.keys
    keys = [os.urandom(32) + (i % 3).to_bytes(4, "big") for i in range(n)]
    ns = Namespace(**ARGS)
    mapper = KeyMapper(ns, prefix="team/kv")
    names = mapper.keys_for(keys)
    ops: list[tuple[str, Callable[[], object]]] = []
    FileMapper, source = load_vllm_file_mapper()
    if FileMapper is not None:
        fm = FileMapper(root_dir="team/kv", **ARGS)
        assert [fm.get_file_name(k) for k in keys[:1000]] == names[:1000], "keys differ from vLLM"
        get = fm.get_file_name
        ops.append((f"vLLM FileMapper.get_file_name [{source}]", lambda: [get(k) for k in keys]))
    key_for = mapper.key_for
    ops.append(("s3kv KeyMapper.key_for", lambda: [key_for(k) for k in keys]))
    ops.append(("s3kv KeyMapper.keys_for (batch)", lambda: mapper.keys_for(keys)))
    ops.append(("s3kv parse_key", lambda: [parse_key(k) for k in names]))
    runs: dict[str, list[float]] = {name: [] for name, _ in ops}
    for r in range(opts.repeat):  # rounds interleave the operations; the order alternates
        for name, fn in ops if r % 2 == 0 else ops[::-1]:
            runs[name].append(rate(fn, n))

    rows = [_trust.mark({"operation": name, "keys_per_s": statistics.median(rates),
                         "keys_per_s_runs": [round(v) for v in rates]},
                        {"keys_per_s": rates}) for name, rates in runs.items()]
    result = _trust.stamp({
        "keys": n,
        "repeat": opts.repeat,
        "vllm_source": source,
        "argv": sys.argv[1:] if argv is None else argv,
        "machine": _trust.machine(shared=trust["loaded"]),
        "rows": rows,
    }, trust)
    print(f"{n:,} keys of 32-byte hashes; python {sys.version.split()[0]}")
    print(markdown(result))
    if opts.json:
        Path(opts.json).write_text(json.dumps(result, indent=1) + "\n")
    if opts.chart:
        print(f"chart: {chart(result, opts.chart)}")


def markdown(result: dict[str, Any]) -> str:
    """The table in docs/benchmarks.md: keys/s per operation, against vLLM's."""
    rows = result["rows"]
    base = next((r["keys_per_s"] for r in rows if r["operation"].startswith("vLLM")), None)
    out = [f"| operation | keys/s (median of {result['repeat']}) | vs vLLM |", "|---|--:|--:|"]
    for r in rows:
        name = r["operation"].split(" [")[0]
        name = name.replace("vLLM ", "vLLM `").replace("s3kv ", "s3kv `")
        name = name.replace(" (batch)", "` (batch)") if "(batch)" in name else name + "`"
        ratio = f"{r['keys_per_s'] / base:.2f}x" if base else "-"
        out.append(f"| {name} | {r['keys_per_s']:,.0f}{_trust.flag(r)} | {ratio} |")
    notes = _trust.notes(result, rows, lambda r: r["operation"].split(" [")[0])
    return "\n".join(out + (["", *notes] if notes else []))


def chart(result: dict[str, Any], path: str) -> Path:
    """Million keys/s: vLLM's get_file_name beside s3kv's key_for, keys_for and parse_key."""
    from scripts.charts import figure, grouped_bars, save

    rate = {r["operation"].split(" [")[0]: r["keys_per_s"] / 1e6 for r in result["rows"]}
    vllm = rate.get("vLLM FileMapper.get_file_name")
    groups = [
        "offload key -> object key\n(one at a time)",
        "offload keys -> object keys\n(a batch)",
        "object key -> its fields\n(parse_key)",
    ]
    series: dict[str, list[float | None]] = {
        "vLLM FileMapper.get_file_name": [vllm, None, None],
        "s3kv": [
            rate["s3kv KeyMapper.key_for"],
            rate["s3kv KeyMapper.keys_for (batch)"],
            rate["s3kv parse_key"],
        ],
    }
    footer = (
        f"Measured: {result['keys']:,} keys of 32-byte block hashes (Llama-3.1-8B namespace), "
        f"median of {result['repeat']} interleaved rounds, in one process; vLLM's FileMapper "
        f"from {result['vllm_source']}. s3kv's keys are byte-identical to vLLM's.\n"
        f"Machine: {result['machine']}. "
        f"Command: python bench/bench_keys.py {' '.join(result['argv'])}"
    )
    notes = _trust.notes(result, result["rows"], lambda r: r["operation"].split(" [")[0])
    footer = "\n".join([footer, *notes])
    fig, axes = figure(
        title="Object keys per second: s3kv beside vLLM's FileMapper",
        footer=footer,
        size=(9, 5.5),
    )
    grouped_bars(axes[0], groups=groups, series=series, ylabel="million keys/s (higher is better)",
                 fmt="{:.2f}")  # fmt: skip
    return save(fig, path)


if __name__ == "__main__":
    main()
