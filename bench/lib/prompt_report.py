"""bench_prompt_load.py's results as tables (markdown) and a chart, from its JSON.

Every cell that summarises rounds is the median with the min-max range; a value whose
rounds disagree by more than 20% carries bench/lib/trust.py's mark. The doc blocks
(scripts/doc_figures.py) call these same functions, so the docs show what the JSON holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.lib.trust import MARK, notes

MiB = 1 << 20
TIERS = {"s3kv": "s3kv", "vllm-obj": "vLLM obj"}
EQUAL = "s3kv-16"
"""s3kv's tier capped at the obj tier's connections (one per I/O thread)."""
SSE_C = "s3kv-sse-c"
"""s3kv's tier with a key per tenant (SSE-C, bench/lib/prompt_run.py)."""
LINKS = ("rgw-http", "rgw-https", "aws-like", "aws-like-tls")


def seconds(v: float) -> str:
    return f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def cell(row: dict[str, Any] | None, metric: str, fmt: Callable[[float], str] = seconds,
         spread: bool = True) -> str:
    """``0.412 (0.398-0.450)``, with the mark when this metric's rounds disagree."""
    if row is None or metric not in row:
        return "-"
    text = fmt(row[metric])
    if spread and f"{metric}_min" in row:
        text += f" ({fmt(row[f'{metric}_min'])}-{fmt(row[f'{metric}_max'])})"
    return text + (MARK if metric in row.get("disagree", ()) else "")


def ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, metric: str) -> str:
    if a is None or b is None or metric not in a or metric not in b or not b[metric]:
        return "-"
    return f"{a[metric] / b[metric]:.2f}x"


def cases(rows: list[dict[str, Any]], prompts: Iterable[int] | None = None,
          ) -> list[tuple[str, int, int, dict[str, dict[str, Any]]]]:
    """(link, prompt tokens, block tokens, {who: row}) in the order links, prompts, blocks."""
    keys = sorted({(r["link"], r["prompt_tokens"], r["block_tokens"]) for r in rows},
                  key=lambda k: (LINKS.index(k[0]) if k[0] in LINKS else 9, k[1], k[2]))
    wanted = set(prompts) if prompts is not None else None
    return [(link, p, b, {r["who"]: r for r in rows
                          if (r["link"], r["prompt_tokens"], r["block_tokens"]) == (link, p, b)})
            for link, p, b in keys if wanted is None or p in wanted]


def ceilings(rows: list[dict[str, Any]]) -> list[str]:
    """The awscrt ceilings' names, s3kv's settings first."""
    names = dict.fromkeys(r["who"] for r in rows if r["kind"] == "ceiling" and r["who"] != "memcpy")
    return sorted(names, key=lambda n: "s3kv" not in n)


def block(r: dict[str, Any]) -> str:
    return f"{r['block_bytes'] // MiB} MiB ({r['block_tokens']} tok)"


def loads(doc: dict[str, Any], prompts: Iterable[int] | None = None) -> str:
    """Seconds to load one prompt: the tiers, the ratio, the ceilings."""
    rows = doc["rows"]
    crts = ceilings(rows)
    head = ["link", "prompt", "block", "s3kv s", "vLLM obj s", "vLLM obj ÷ s3kv",
            *(f"{c} s" for c in crts), *(["s3kv ÷ awscrt"] if crts else []), "memcpy s"]
    out = ["| " + " | ".join(head) + " |", "|---|--:|---|" + "--:|" * (len(head) - 3)]
    for link, prompt, _, by in cases(rows, prompts):
        any_row = next(iter(by.values()))
        cells = [link, f"{prompt:,}", block(any_row), cell(by.get("s3kv"), "load_s"),
                 cell(by.get("vllm-obj"), "load_s"),
                 ratio(by.get("vllm-obj"), by.get("s3kv"), "load_s"),
                 *(cell(by.get(c), "load_s") for c in crts),
                 *([ratio(by.get("s3kv"), by.get(crts[0]), "load_s")] if crts else []),
                 cell(by.get("memcpy"), "load_s", spread=False)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out + _legend(doc))


def stores(doc: dict[str, Any]) -> str:
    """Store throughput of one store job of the prompt (MiB/s from the median time)."""
    out = ["| link | prompt | block | s3kv MiB/s | vLLM obj MiB/s | s3kv ÷ vLLM obj |",
           "|---|--:|---|--:|--:|--:|"]
    for link, prompt, _, by in cases(doc["rows"]):
        s3kv, obj = by.get("s3kv"), by.get("vllm-obj")
        any_row = next(iter(by.values()))
        mib = [cell(r, "store_mib_s", lambda v: f"{v:.0f}", spread=False)
               + (MARK if r is not None and "store_s" in r.get("disagree", ()) else "")
               for r in (s3kv, obj)]
        out.append(f"| {link} | {prompt:,} | {block(any_row)} | {mib[0]} | {mib[1]} | "
                   f"{ratio(s3kv, obj, 'store_mib_s')} |")
    return "\n".join(out + _legend(doc))


def cpu(doc: dict[str, Any]) -> str:
    """Client CPU seconds per GiB moved, store and load (medians). s3kv's counts its I/O
    process with EngineCore's; the share spent in EngineCore's own process follows in
    parentheses (vLLM's obj tier runs all of it there)."""
    rows = doc["rows"]
    crts = ceilings(rows)[:1]
    out = ["| link | prompt | block | store: s3kv (in EngineCore) | store: vLLM obj "
           "| load: s3kv (in EngineCore) | load: vLLM obj |"
           + "".join(f" load: {c} |" for c in crts),
           "|---|--:|---|--:|--:|--:|--:|" + "--:|" * len(crts)]
    two = lambda v: f"{v:.2f}"  # noqa: E731

    def tier_cell(row: dict[str, Any] | None, what: str) -> str:
        text = cell(row, f"{what}_cpu_s_per_gib", two, spread=False)
        if row is not None and row.get("io_process") and f"{what}_engine_cpu_s_per_gib" in row:
            text += f" ({row[f'{what}_engine_cpu_s_per_gib']:.2f})"
        return text

    for link, prompt, _, by in cases(rows):
        any_row = next(iter(by.values()))
        cells = [tier_cell(by.get(t), w) for w in ("store", "load") for t in TIERS]
        cells += [cell(by.get(c), "load_cpu_s_per_gib", two, spread=False) for c in crts]
        out.append(f"| {link} | {prompt:,} | {block(any_row)} | " + " | ".join(cells) + " |")
    return "\n".join(out + _legend(doc))


def encryption(doc: dict[str, Any]) -> str:
    """What a key per tenant (SSE-C) costs: s3kv's tier with and without it, load seconds
    and store MiB/s, where the run had both (``--tiers s3kv,s3kv-sse-c``, TLS links)."""
    out = ["| link | prompt | block | load s | load s, SSE-C | SSE-C ÷ plain (load) | "
           "store MiB/s | store MiB/s, SSE-C | plain ÷ SSE-C (store) |",
           "|---|--:|---|--:|--:|--:|--:|--:|--:|"]
    for link, prompt, _, by in cases(doc["rows"]):
        plain, keyed = by.get("s3kv"), by.get(SSE_C)
        if keyed is None:
            continue
        mib = lambda r: cell(r, "store_mib_s", lambda v: f"{v:.0f}", spread=False)  # noqa: E731
        out.append(
            f"| {link} | {prompt:,} | {block(keyed)} | {cell(plain, 'load_s')} | "
            f"{cell(keyed, 'load_s')} | {ratio(keyed, plain, 'load_s')} | {mib(plain)} | "
            f"{mib(keyed)} | {ratio(plain, keyed, 'store_mib_s')} |")
    return "\n".join(out + _legend(doc)) if len(out) > 2 else ""


def equal_footing(doc: dict[str, Any]) -> str:
    """Loads with s3kv's tier capped at the obj tier's requests in flight (one connection
    per I/O thread), beside its defaults: which lead is the client's."""
    out = ["| link | prompt | block | s3kv (defaults) s | s3kv at obj's connections s | "
           "vLLM obj s | vLLM obj ÷ s3kv at equal connections |", "|---|--:|---|--:|--:|--:|--:|"]
    for link, prompt, _, by in cases(doc["rows"]):
        if EQUAL not in by:
            continue
        out.append(f"| {link} | {prompt:,} | {block(by[EQUAL])} | {cell(by.get('s3kv'), 'load_s')} "
                   f"| {cell(by.get(EQUAL), 'load_s')} | {cell(by.get('vllm-obj'), 'load_s')} | "
                   f"{ratio(by.get('vllm-obj'), by.get(EQUAL), 'load_s')} |")
    return "\n".join(out + _legend(doc))


def loop(doc: dict[str, Any]) -> str:
    """The stand-in EngineCore loop (bench/lib/engine_loop.py) during each tier's load:
    steps per second (median, min-max over the rounds) and step time p99; idle is the
    same loop with no load beside it."""
    out = ["| link | prompt | block | idle steps/s | during s3kv's load | during vLLM obj's "
           "load | s3kv ÷ vLLM obj | p99 step ms: s3kv / vLLM obj |",
           "|---|--:|---|--:|--:|--:|--:|--:|"]
    for link, prompt, _, by in cases(doc["rows"]):
        s3kv, obj = by.get("s3kv"), by.get("vllm-obj")
        any_row = s3kv or obj
        if any_row is None or "loop" not in any_row:
            continue
        idle = by.get("engine-idle")

        def steps(r: dict[str, Any] | None) -> str:
            if r is None or "loop" not in r:
                return "-"
            lp = r["loop"]
            return (f"{lp['steps_per_s']:.0f} ({lp['steps_per_s_min']:.0f}-"
                    f"{lp['steps_per_s_max']:.0f})"
                    + (MARK if "loop_steps_per_s" in r.get("disagree", ()) else ""))

        both = s3kv is not None and obj is not None and "loop" in s3kv and "loop" in obj
        share = f"{s3kv['loop']['steps_per_s'] / obj['loop']['steps_per_s']:.2f}x" if (
            both and obj["loop"]["steps_per_s"]) else "-"
        p99 = (f"{s3kv['loop']['step_ms_p99']:.1f} / {obj['loop']['step_ms_p99']:.1f}"
               if both else "-")
        out.append(f"| {link} | {prompt:,} | {block(any_row)} | {steps(idle)} | {steps(s3kv)} "
                   f"| {steps(obj)} | {share} | {p99} |")
    return "\n".join(out + _legend(doc))


def calls(doc: dict[str, Any]) -> str:
    """Scheduler-side calls, p50 / p99 / max in microseconds over all rounds."""
    names = ("lookup", "submit_store", "submit_load", "get_finished_jobs")
    out = ["| link | prompt | block | tier | " + " | ".join(f"{c} µs" for c in names) + " |",
           "|---|--:|---|---|" + "--:|" * len(names)]
    for link, prompt, _, by in cases(doc["rows"]):
        for who, label in TIERS.items():
            r = by.get(who)
            if r is None:
                continue
            c = r.get("calls_us", {})
            cells = ["{p50:,.0f} / {p99:,.0f} / {max:,.0f}".format(**c[n]) if n in c else "-"
                     for n in names]
            out.append(f"| {link} | {prompt:,} | {block(r)} | {label} | " + " | ".join(cells)
                       + " |")
    return "\n".join(out + _legend(doc, marks=False))


def _legend(doc: dict[str, Any], marks: bool = True) -> list[str]:
    lines = [f"Loaded machine: load average {doc['trust']['load_average_1m']:g} at the start."
             ] if doc.get("loaded") else []
    if marks and any(r.get("disagree") for r in doc["rows"]):
        lines.append(f"{MARK} rounds disagree by more than 20% (max/min - 1).")
    return ["", *lines] if lines else []


def label(r: dict[str, Any]) -> str:
    return f"{r['link']} {r['prompt_tokens']:,}/{r['block_bytes'] // MiB} MiB {r['who']}"


def chart(doc: dict[str, Any], path: Path) -> Path:
    """Seconds to load one prompt per link and prompt, bars per block size and contender."""
    from scripts.charts import figure, footer, grouped_bars, legend, save

    rows, meta = doc["rows"], doc["meta"]
    links = [x for x in LINKS if any(r["link"] == x for r in rows)]
    prompts = sorted({r["prompt_tokens"] for r in rows})
    blocks = sorted({(r["block_bytes"], r["block_tokens"]) for r in rows})
    names = {**TIERS, **{c: c for c in ceilings(rows)}}
    if any(r["who"] == SSE_C for r in rows):
        names = {**TIERS, SSE_C: "s3kv, SSE-C", **{c: c for c in ceilings(rows)}}
    fig, axes = figure(
        title="Time to load one prompt's KV (Llama-3.1-8B, 128 KiB per token): median seconds",
        footer=footer(
            f"Measured: one load job of all of a prompt's blocks, as vLLM asks for it; both "
            f"tiers built by vLLM's SecondaryTierFactory, {meta['threads']} I/O threads each, "
            f"loads checked byte for byte; {meta['rounds']} interleaved rounds, bars min-max; "
            f"heap frozen as vLLM's EngineCore does. awscrt: bare GETs into memory, no tier. "
            f"Links: {_links_text(meta, links)}.",
            machine_line=meta["machine"], command=f"python {meta['command']}",
            notes=notes(doc, rows, label, metrics=["load_s"])),
        nrows=len(prompts), ncols=len(links),
        size=(max(11.0, 4.6 * len(links)), 3.6 * len(prompts) + 2.2),
    )  # fmt: skip
    for i, prompt in enumerate(prompts):
        for j, link in enumerate(links):
            by = {(r["who"], r["block_bytes"]): r for r in rows
                  if r["link"] == link and r["prompt_tokens"] == prompt}
            series = {label_: [by[(who, b)]["load_s"] if (who, b) in by else None
                               for b, _ in blocks] for who, label_ in names.items()}
            ranges = {label_: [(by[(who, b)]["load_s_min"], by[(who, b)]["load_s_max"])
                               if (who, b) in by else None for b, _ in blocks]
                      for who, label_ in names.items()}
            grouped_bars(axes[i * len(links) + j],
                         groups=[f"{b // MiB} MiB\n({t} tokens)" for b, t in blocks],
                         series=series, ranges=ranges, ylabel="seconds (lower is better)",
                         title=f"{link}: {prompt:,}-token prompt", fmt="{:.2f}",
                         legend=False)  # fmt: skip
    legend(fig, axes[0])
    return save(fig, path)


def _links_text(meta: dict[str, Any], links: list[str]) -> str:
    parts = {"rgw-http": "rgw-http: Ceph RGW 16 on loopback over HTTP",
             "rgw-https": "rgw-https: the same over TLS"}
    text = [parts[x] for x in links if x in parts]
    aws = meta.get("links", {}).get("aws-like")
    if "aws-like" in links and aws:
        cap = aws.get("connection_mb_s")
        text.append(f"aws-like: RGW over HTTP behind a proxy adding {aws['first_byte_ms']:g} ms "
                    "of first-byte latency to each request"
                    + (f" and capping each connection at {cap:g} MB/s" if cap else ""))
    return "; ".join(text)
