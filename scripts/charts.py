"""Charts of benchmark results: PNGs for docs/img/, each saying what, where and when.

Drawn by the benchmarks' ``--redraw`` (bench/bench_*.py, bench/lib/*_report.py) and by
scripts/dashboard_run.py:

* ``figure()`` a titled figure with a footer (what was measured, the machine, the date)
* ``grouped_bars()`` bars per group (block size, operation) and series (client), with
  optional min-max ranges
* ``legend()`` one legend row for a figure of several panels
* ``lines()`` one line per series, log-scale x and y by default (e.g. requests against
  chain length)
* ``footer()`` a footer: what was measured, then the trust notes (bench/lib/trust.py;
  the machine line is ``bench.lib.trust.machine()``, recorded in the JSON)

matplotlib runs on its Agg backend (no display); it is in the ``bench`` extra, and
imported only when a chart is drawn (the benchmarks that import this module run
without it, e.g. in .venv-vllm).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OURS = "s3kv"
OURS_COLOR = "#d62728"
OURS_LIGHT = "#f2a0a0"
# Everyone else in quiet, distinguishable colours (matplotlib's tab10 without the red).
OTHERS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def footer(measured: str, *, machine_line: str, command: str, notes: Sequence[str] = ()) -> str:
    """What was measured, where and how to rerun it, then any trust notes (one per line)."""
    return "\n".join([measured, f"Machine: {machine_line}. Command: {command}", *notes])


def figure(
    *, title: str, footer: str, nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (11, 7)
) -> tuple[Any, list[Any]]:
    """A figure with ``nrows x ncols`` axes (flattened, row by row), a title and a footer."""
    fig, axes = pyplot().subplots(nrows, ncols, figsize=size, squeeze=False)
    fig.s3kv_footer = footer  # save() keeps room for it
    fig.suptitle(title, fontsize=13, fontweight="bold")
    fig.text(0.01, 0.01, footer, fontsize=8, color="#444444", ha="left", va="bottom", wrap=True)
    return fig, [ax for row in axes for ax in row]


def legend(fig: Any, ax: Any) -> None:
    """One legend for the whole figure, in a row under the title (from ax's series)."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncols=min(len(labels), 7),
               bbox_to_anchor=(0.5, 0.955), frameon=False, fontsize=9)  # fmt: skip


def ours(name: str) -> bool:
    """Is this series s3kv's (``s3kv``, or ``s3kv, Ceph RGW``: a place after a comma)?"""
    return name == OURS or name.startswith(OURS + ",")


def colors(names: Sequence[str]) -> dict[str, str]:
    """s3kv in red (a second s3kv series, as ``s3kv, SSE-C``, in light red), every other
    series its own colour, stable for a given list of names."""
    others = iter(OTHERS * 3)
    reds = iter([OURS_COLOR, *[OURS_LIGHT] * len(names)])
    return {n: next(reds) if ours(n) else next(others) for n in names}


def grouped_bars(
    ax: Any,
    *,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    ylabel: str,
    title: str = "",
    fmt: str = "{:.0f}",
    legend: bool = True,
    ranges: dict[str, Sequence[tuple[float, float] | None]] | None = None,
) -> None:
    """One cluster of bars per group, one bar per series, values on top.

    A series with None in a group has no bar there; the group's bars stay centred.
    ``ranges`` gives a (min, max) per bar, drawn as an error bar around the value (the
    spread of the rounds behind a median).
    """
    palette = colors(list(series))
    width = 0.8 / max(len(series), 1)
    labelled: set[str] = set()
    for g in range(len(groups)):
        present = [(n, v[g]) for n, v in series.items() if g < len(v) and v[g] is not None]
        for i, (name, value) in enumerate(present):
            x = g + (i - (len(present) - 1) / 2) * width
            span = (ranges or {}).get(name)
            lo_hi = span[g] if span is not None and g < len(span) else None
            bars = ax.bar(
                [x],
                [value],
                width * 0.95,
                label=None if name in labelled else name,
                color=palette[name],
                edgecolor="black" if ours(name) else "none",
                linewidth=0.8,
                yerr=None if lo_hi is None else [[value - lo_hi[0]], [lo_hi[1] - value]],
                capsize=2,
                error_kw={"elinewidth": 0.8, "ecolor": "#333333"},
            )
            labelled.add(name)
            if lo_hi is None:
                ax.bar_label(bars, labels=[fmt.format(value)], fontsize=7, padding=1)
            else:  # above the range's top, clear of the error bar
                ax.annotate(fmt.format(value), (x, lo_hi[1]), xytext=(0, 1),
                            textcoords="offset points", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.margins(y=0.12)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title, fontsize=11)
    if legend:
        ax.legend(fontsize=8, ncols=2, frameon=False)


def lines(
    ax: Any,
    *,
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = True,
    logy: bool = True,
) -> None:
    """One line with markers per series of (xs, ys); log-scale axes unless told otherwise."""
    palette = colors(list(series))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=name, color=palette[name],
                linewidth=2.2 if ours(name) else 1.4)  # fmt: skip
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(which="both", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=11)
    ax.legend(fontsize=8, frameon=False)


def footer_height(fig: Any) -> float:
    """The footer's share of the figure's height, from its text wrapped to the width."""
    width, height = fig.get_size_inches()
    per_line = max(40, int(width * 17))  # characters of 8-point text per line
    text = getattr(fig, "s3kv_footer", "")
    lines = sum(max(1, -(-len(line) // per_line)) for line in text.split("\n"))
    return min(0.6, (lines + 1) * 0.155 / height)


def save(fig: Any, path: str | os.PathLike[str], *, footer_lines: int | None = None) -> Path:
    """Write the PNG (room kept at the bottom for the footer) and close the figure.

    ``footer_lines`` reserves that many lines (older charts); by default the room is
    worked out from the footer's text.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    bottom = 0.025 * (footer_lines + 1) if footer_lines is not None else footer_height(fig)
    fig.tight_layout(rect=(0, bottom, 1, 0.93))
    fig.savefig(out, dpi=110)
    pyplot().close(fig)
    return out
