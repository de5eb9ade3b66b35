"""Charts of benchmark results: PNGs for docs/img/, each saying what, where and when.

Shared by the benchmark scripts:

* ``figure()`` a titled figure with a footer (what was measured, the machine, the date)
* ``grouped_bars()`` bars per group (block size, operation) and series (client)
* ``legend()`` one legend row for a figure of several panels
* ``lines()`` one line per series, log-scale x and y by default (e.g. requests against
  chain length)
* ``machine()`` the footer's machine line: cores, Python, OS, date

matplotlib runs on its Agg backend (no display); it is in the ``bench`` extra, and
imported only when a chart is drawn (``machine()`` and the scripts that import this
module run without it, e.g. in .venv-vllm).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

OURS = "s3kv"
OURS_COLOR = "#d62728"
# Everyone else in quiet, distinguishable colours (matplotlib's tab10 without the red).
OTHERS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def machine(*, shared: bool = True) -> str:
    """``2-core machine, shared with other jobs, Python 3.11.7, Linux x86_64, 2026-11-30``."""
    where = f"{os.cpu_count()}-core machine" + (", shared with other jobs" if shared else "")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    system = f"{platform.system()} {platform.machine()}"
    return f"{where}, Python {platform.python_version()}, {system}, {when}"


def figure(
    *, title: str, footer: str, nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (11, 7)
) -> tuple[Any, list[Any]]:
    """A figure with ``nrows x ncols`` axes (flattened, row by row), a title and a footer."""
    fig, axes = pyplot().subplots(nrows, ncols, figsize=size, squeeze=False)
    fig.suptitle(title, fontsize=13, fontweight="bold")
    fig.text(0.01, 0.01, footer, fontsize=8, color="#444444", ha="left", va="bottom", wrap=True)
    return fig, [ax for row in axes for ax in row]


def legend(fig: Any, ax: Any) -> None:
    """One legend for the whole figure, in a row under the title (from ax's series)."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncols=min(len(labels), 7),
               bbox_to_anchor=(0.5, 0.955), frameon=False, fontsize=9)  # fmt: skip


def colors(names: Sequence[str]) -> dict[str, str]:
    """s3kv in red, every other series its own colour, stable for a given list of names."""
    others = iter(OTHERS * 3)
    return {n: OURS_COLOR if n == OURS else next(others) for n in names}


def grouped_bars(
    ax: Any,
    *,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    ylabel: str,
    title: str = "",
    fmt: str = "{:.0f}",
    legend: bool = True,
) -> None:
    """One cluster of bars per group, one bar per series, values on top.

    A series with None in a group has no bar there; the group's bars stay centred.
    """
    palette = colors(list(series))
    width = 0.8 / max(len(series), 1)
    labelled: set[str] = set()
    for g in range(len(groups)):
        present = [(n, v[g]) for n, v in series.items() if g < len(v) and v[g] is not None]
        for i, (name, value) in enumerate(present):
            x = g + (i - (len(present) - 1) / 2) * width
            bars = ax.bar(
                [x],
                [value],
                width * 0.95,
                label=None if name in labelled else name,
                color=palette[name],
                edgecolor="black" if name == OURS else "none",
                linewidth=0.8,
            )
            labelled.add(name)
            ax.bar_label(bars, labels=[fmt.format(value)], fontsize=7, padding=1)
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
                linewidth=2.2 if name == OURS else 1.4)  # fmt: skip
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


def save(fig: Any, path: str | os.PathLike[str], *, footer_lines: int = 2) -> Path:
    """Write the PNG (room kept at the bottom for the footer) and close the figure."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=(0, 0.025 * (footer_lines + 1), 1, 0.93))
    fig.savefig(out, dpi=110)
    pyplot().close(fig)
    return out
