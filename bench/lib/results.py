"""A benchmark's results on disk: the JSON a run writes, and the saved JSON that
``--redraw`` draws again and ``--table`` prints again, with no measuring."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Doc = dict[str, Any]


def load(path: str | Path) -> Doc:
    doc: Doc = json.loads(Path(path).read_text())
    return doc


def from_saved(args: argparse.Namespace, table: Callable[[Doc], str],
               chart: Callable[[Doc, Any], Any] | None = None) -> bool:
    """``--redraw JSON`` draws ``--chart`` from a saved run, ``--table JSON`` prints its
    table; True when either was asked (nothing is measured then)."""
    redraw = getattr(args, "redraw", None)
    if redraw and chart is not None:
        print(chart(load(redraw), args.chart))
        return True
    if args.table:
        print(table(load(args.table)))
        return True
    return False


def write(doc: Doc, path: str | Path) -> Path:
    """The run's JSON, one key per line at the top level's depth (diffs stay readable)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return out


def draw(chart: Callable[[Doc, Any], Any], doc: Doc, path: Path, *, script: str,
         saved: Path) -> None:
    """Draw the run's chart; without matplotlib (the bench extra), say how to draw it later."""
    try:
        print(f"wrote {chart(doc, path)}")
    except ImportError:
        print("no chart: matplotlib is not installed here (the bench extra); draw it with "
              f"`.venv/bin/python {script} --redraw {saved}`")
