"""Figures in the docs: the blocks generated from JSON, and figures written by hand.

A generated block in README.md or docs/*.md::

    <!-- bench:prompt-load:loads -->
    ...what scripts/doc_figures.py renders from docs/img/prompt-load.json...
    <!-- /bench -->

``NAME:VIEW`` names the JSON (docs/img/NAME.json) and what to render from it (a table,
a chart). Outside the blocks, ``figures()`` finds what looks like a measurement: a
throughput (MiB/s, GiB/s, MB/s, Gb/s, keys/s, objects/s), a time (ms, µs, seconds with
a decimal point), a cost (s/GiB), a ratio (``1.38x``), a percentage in a sentence about
speed or cost; ``measured_tables()`` finds hand-written tables whose header names such a
quantity. Fenced code is skipped (commands, configuration).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

BLOCK = re.compile(r"<!-- bench:(?P<name>[\w.-]+):(?P<view>[\w.-]+) -->\n"
                   r"(?P<body>.*?)<!-- /bench -->", re.S)
_NUM = r"(?<![\w.,])\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUM}(?:\s?[-\u2013]\s?{_NUM})?"
_FIGURE = re.compile(
    rf"(?P<text>(?P<nums>{_RANGE})\s?(?P<unit>[KMG]i?B/s|Gb/s|keys/s|objects/s|requests/s"
    rf"|s/GiB|ms|µs)(?![\w/])"
    rf"|(?P<snums>(?<![\w.,])\d[\d,]*\.\d+(?:\s?[-\u2013]\s?{_NUM})?)\s(?P<sunit>s)(?![\w/])"
    rf"|(?P<xnums>{_RANGE})(?P<xunit>x)(?!\w)"
    rf"|(?P<pnums>{_RANGE})\s?(?P<punit>%))")
_SPEED = re.compile(r"faster|slower|sooner|later|quicker|throughput|speed|CPU|latency|"
                    r"overhead|less|more|cost|ahead|behind|load|store", re.I)
_MEASURE_HEAD = re.compile(r"MiB/s|GiB/s|MB/s|keys/s|objects/s|s/GiB|\bms\b|µs|\bp50\b|"
                           r"\bp99\b|median|TTFT|\bwall\b|\bCPU s\b|\bvs\b|÷|\bx\b", re.I)


@dataclass(frozen=True)
class Figure:
    line: int
    text: str
    values: tuple[tuple[float, int], ...]  # (value, decimals) of each number
    context: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.text!r} in {self.context.strip()[:100]!r}"


def render(text: str, block: Callable[[str, str], str]) -> str:
    """``text`` with every block's body replaced by ``block(name, view)``."""
    def body(m: re.Match[str]) -> str:
        new = block(m["name"], m["view"]).rstrip("\n")
        return f"<!-- bench:{m['name']}:{m['view']} -->\n{new}\n<!-- /bench -->"
    return BLOCK.sub(body, text)


def blocks(text: str) -> Iterator[tuple[str, str, str]]:
    """(name, view, body) of each block, in order."""
    for m in BLOCK.finditer(text):
        yield m["name"], m["view"], m["body"]


def outside(text: str) -> str:
    """``text`` with blocks and fenced code blanked out (line numbers kept)."""
    def blank(m: re.Match[str]) -> str:
        return "\n" * m.group(0).count("\n")
    text = BLOCK.sub(blank, text)
    return re.sub(r"^```.*?^```", blank, text, flags=re.S | re.M)


def _numbers(span: str) -> tuple[tuple[float, int], ...]:
    out = []
    for n in re.findall(r"\d[\d,]*(?:\.\d+)?", span):
        plain = n.replace(",", "")
        out.append((float(plain), len(plain.split(".")[1]) if "." in plain else 0))
    return tuple(out)


def figures(text: str) -> list[Figure]:
    """What looks like a measured figure, outside blocks and code."""
    found = []
    for lineno, line in enumerate(outside(text).splitlines(), 1):
        if line.lstrip().startswith("|"):
            continue  # tables: measured_tables()
        for m in _FIGURE.finditer(line):
            if m["punit"] and not _SPEED.search(line):
                continue
            nums = m["nums"] or m["snums"] or m["xnums"] or m["pnums"]
            found.append(Figure(lineno, m["text"], _numbers(nums), line))
    return found


def measured_tables(text: str) -> list[Figure]:
    """Rows of hand-written tables whose header names a measured quantity."""
    found: list[Figure] = []
    lines = outside(text).splitlines()
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|") and i + 1 < len(lines) and "---" in lines[i + 1]:
            head, i = lines[i], i + 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                numeric = [c for c in cells if re.fullmatch(r"[\d,.\s/x%†-]+", c)
                           and re.search(r"\d", c)]
                if _MEASURE_HEAD.search(head) and numeric:
                    found.append(Figure(i + 1, numeric[0], _numbers(numeric[0]), lines[i]))
                i += 1
        else:
            i += 1
    return found


def json_numbers(doc: Any) -> Iterator[float]:
    """Every number in a JSON document."""
    if isinstance(doc, bool):
        return
    if isinstance(doc, (int, float)):
        yield float(doc)
    elif isinstance(doc, dict):
        for v in doc.values():
            yield from json_numbers(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from json_numbers(v)


def matches(figure: Figure, numbers: Iterable[float]) -> bool:
    """Every number of the figure equals some JSON number at the figure's precision."""
    pool = list(numbers)
    return all(any(round(n, decimals) == value for n in pool)
               for value, decimals in figure.values)
