"""Fill the figures in README.md and docs/*.md from the committed JSON in docs/img/.

    .venv/bin/python scripts/doc_figures.py           # rewrite every marked block
    .venv/bin/python scripts/doc_figures.py --check   # exit 1 naming blocks that differ

Every figure the docs quote lives between ``<!-- bench:NAME:VIEW -->`` and
``<!-- /bench -->`` (scripts/doc_blocks.py) and is rendered here from docs/img/NAME.json
by the benchmark's own table and chart functions, so a doc cannot drift from its JSON.
Where the JSON does not exist yet the block says which command, run on a quiet machine,
produces it. tests/unit/test_doc_figures.py checks that every block is what this
renders, that every JSON shown was recorded on a quiet machine, and that no measured
figure sits outside a block.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
IMG = ROOT / "docs" / "img"
sys.path.insert(0, str(ROOT))  # s3kv, bench and scripts from this checkout

from scripts.doc_blocks import render  # noqa: E402

Table = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Source:
    """One JSON in docs/img, the command that writes it and what the docs show of it."""

    command: str
    tables: dict[str, Callable[[], Table]] = field(default_factory=dict)
    chart: str = ""  # alt text of its chart (docs/img/NAME.png); empty: no chart shown


def _prompt(view: str) -> Callable[[], Table]:
    def get() -> Table:
        from bench.lib import prompt_report as r

        if view.startswith("loads-"):  # one prompt length: loads-8192
            tokens = int(view.split("-", 1)[1])
            return lambda doc: r.loads(doc, prompts=[tokens])
        return {"loads": r.loads, "stores": r.stores, "cpu": r.cpu, "calls": r.calls,
                "loop": r.loop, "equal": r.equal_footing}[view]
    return get


def _from(module: str, name: str = "markdown") -> Callable[[], Table]:
    def get() -> Table:
        table: Table = getattr(importlib.import_module(module), name)
        return table
    return get


TRANSFER = ".venv/bin/python bench/bench_rgw.py --json-dir docs/img"
SOURCES: dict[str, Source] = {
    "prompt-load": Source(
        ".venv-vllm/bin/python bench/bench_prompt_load.py",
        {v: _prompt(v) for v in ("loads", "loads-3072", "loads-8192", "stores", "cpu",
                                 "calls", "loop", "equal")},
        "Seconds to load one prompt's KV, per link and block size: s3kv's tier, vLLM's obj "
        "tier and bare awscrt GETs"),
    "prompt-load-sse-c": Source(
        ".venv-vllm/bin/python bench/bench_prompt_load.py --links rgw-https,aws-like-tls "
        "--tiers s3kv,s3kv-sse-c --prompts 3072 --rounds 3 --ceilings '' "
        "--json docs/img/prompt-load-sse-c.json --chart docs/img/prompt-load-sse-c.png",
        {"encryption": _from("bench.lib.prompt_report", "encryption")},
        "Seconds to load one prompt's KV with and without a key per tenant (SSE-C): "
        "s3kv's tier on Ceph RGW over TLS and the AWS-like TLS link"),
    "clients": Source(
        ".venv/bin/python bench/bench_clients.py --json docs/img/clients.json",
        {"table": _from("bench.bench_clients", "table")}),
    "ttft": Source(
        ".venv-vllm-engine/bin/python bench/bench_ttft.py",
        {"table": _from("bench.bench_ttft")},
        "Time to first token of a real vLLM engine: recompute, an S3 hit on Ceph RGW, "
        "vLLM's fs tier"),
    "lookup-requests": Source(
        ".venv-vllm/bin/python bench/bench_lookup_latency.py --backend rgw --repeat 3 "
        "--json docs/img/lookup-requests.json",
        {"table": _from("bench.bench_lookup_latency")},
        "Lookup of one prompt's chain: HEAD requests and time to verdict against chain "
        "length, s3kv's tier and vLLM's obj tier"),
    "renewal": Source(
        ".venv-vllm/bin/python bench/bench_renewal.py --servers rgw-http,rgw-https "
        "--json docs/img/renewal.json",
        {"table": _from("bench.bench_renewal")}),
    "renewal-drain": Source(
        ".venv-vllm/bin/python bench/bench_renewal.py --drain 1000 --servers rgw-http "
        "--json docs/img/renewal-drain.json",
        {"table": _from("bench.bench_renewal")}),
    "keys": Source(
        ".venv-vllm/bin/python bench/bench_keys.py --json docs/img/keys.json",
        {"table": _from("bench.bench_keys")}),
    "transfer-rgw-http": Source(TRANSFER, {"table": _from("bench.lib.transfer_report")},
                                "s3kv and other S3 clients on Ceph RGW over HTTP"),
    "transfer-rgw-https": Source(TRANSFER, {"table": _from("bench.lib.transfer_report")},
                                 "s3kv and other S3 clients on Ceph RGW over TLS"),
    "bulk": Source(
        ".venv/bin/python bench/bench_bulk.py --json docs/img/bulk.json",
        {"table": _from("bench.lib.bulk_report"),
         "summary": _from("bench.lib.bulk_report", "summary")}),
}


def docs() -> list[Path]:
    """The pages whose figures come from JSON: README.md and docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def json_path(name: str) -> Path:
    return IMG / f"{name}.json"


def placeholder(name: str, view: str = "table") -> str:
    what = "Chart" if view == "chart" else "Table"
    return (f"*({what} pending a quiet-machine run: `{SOURCES[name].command}` writes "
            f"docs/img/{name}.json.)*")


def block(name: str, view: str, page: Path) -> str:
    """What the block ``name:view`` on ``page`` shows: from the JSON, or its placeholder."""
    source = SOURCES.get(name)
    if source is None:
        raise KeyError(f"{page.name}: bench:{name}:{view}: no such source; known: "
                       f"{', '.join(sorted(SOURCES))}")
    if view != "chart" and view not in source.tables:
        raise KeyError(f"{page.name}: bench:{name}:{view}: no such view; known: "
                       f"{', '.join([*source.tables, *(['chart'] if source.chart else [])])}")
    path = json_path(name)
    if not path.exists():
        return placeholder(name, view)
    if view == "chart":
        png = path.with_suffix(".png")
        if not source.chart:
            raise KeyError(f"{page.name}: bench:{name}:chart: {name} has no chart in the docs")
        if not png.exists():
            raise FileNotFoundError(f"{png} is missing: draw it from {path.name} with the "
                                    "benchmark's --redraw")
        return f"![{source.chart}]({png.relative_to(page.parent).as_posix()})"
    return source.tables[view]()(json.loads(path.read_text()))


def regenerate(page: Path) -> str:
    return render(page.read_text(), lambda name, view: block(name, view, page))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = p.parse_args(argv)
    stale = []
    for page in docs():
        new = regenerate(page)
        if new != page.read_text():
            stale.append(page.relative_to(ROOT).as_posix())
            if not args.check:
                page.write_text(new)
    verb = "differ from their JSON" if args.check else "rewritten"
    print(f"{verb}: {', '.join(stale)}" if stale else "every block matches its JSON")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
