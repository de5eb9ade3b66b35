"""``s3kv ls``'s table for a terminal: one line per namespace, at most 100 characters.

Sizes and ages are human (``8.0 MiB``, ``3d..2m``); a folder name too long for what the
other columns leave is cut in the middle, keeping the model's start and the digest.
What is unusual (no manifest, a bad one) goes in notes below the table, not a column.
``--json`` carries every field unabridged.
"""

from __future__ import annotations

from datetime import datetime, timezone

from s3kv.cli.units import elide_middle, format_age, format_bytes
from s3kv.inventory import Inventory, NamespaceSummary
from s3kv.location import parse_location

WIDTH = 100
GAP = "  "
MIN_FOLDER = 20
HEADER = ("FOLDER", "DTYPE", "TP/PP/PCP/DCP", "RANKS", "BLOCKS", "SIZE", "AGE")
RIGHT = {"BLOCKS", "SIZE"}  # numbers line up on the right


def ranks_text(ranks: tuple[int, ...]) -> str:
    """``0,1,2,3,6`` as ``0-3,6``: eight ranks stay short."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs) or "-"


def age_text(ns: NamespaceSummary, now: datetime) -> str:
    """How long ago the oldest..newest block was written (one age when they round alike)."""
    if ns.oldest is None or ns.newest is None:
        return "-"
    old = format_age((now - ns.oldest).total_seconds())
    new = format_age((now - ns.newest).total_seconds())
    return new if old == new else f"{old}..{new}"


def folder_text(ns: NamespaceSummary, under: str) -> str:
    """The folder as seen from the listed location (its prefix is what the user typed)."""
    prefix = ns.prefix
    if under and (prefix == under or prefix.startswith(under + "/")):
        prefix = prefix[len(under) :].lstrip("/")
    return f"{prefix}/{ns.folder}" if prefix else ns.folder


def row(ns: NamespaceSummary, now: datetime, under: str) -> tuple[str, ...]:
    sizes = "/".join(
        str(x) if x is not None else "?" for x in (ns.tp_size, ns.pp_size, ns.pcp_size, ns.dcp_size)
    )
    return (
        folder_text(ns, under),
        ns.dtype or "?",
        sizes,
        ranks_text(ns.ranks),
        f"{ns.blocks:,}",
        format_bytes(ns.bytes),
        age_text(ns, now),
    )


def notes(inv: Inventory) -> list[str]:
    out = []
    for ns in inv.namespaces:
        if ns.manifest == "invalid":
            out.append(f"{ns.folder}: manifest unusable: {ns.manifest_problem}")
        elif ns.manifest == "missing":
            out.append(f"{ns.folder}: no manifest (model, dtype and sizes read from keys)")
    if inv.stray_keys:
        out.append(f"{inv.stray_keys} key(s) outside the vLLM layout (see 's3kv verify')")
    return out


def render(inv: Inventory, *, now: datetime | None = None, width: int = WIDTH) -> list[str]:
    """The table's lines, then the notes; every table line fits ``width``."""
    now = now or datetime.now(timezone.utc)
    under = parse_location(inv.location).prefix.rstrip("/")
    rows = [HEADER, *(row(ns, now, under) for ns in inv.namespaces)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    room = width - sum(widths[1:]) - len(GAP) * (len(HEADER) - 1)
    widths[0] = max(min(widths[0], room), MIN_FOLDER)
    lines = []
    for r in rows:
        cells = [elide_middle(r[0], widths[0]), *r[1:]]
        lines.append(
            GAP.join(
                c.rjust(w) if h in RIGHT else c.ljust(w)
                for c, w, h in zip(cells, widths, HEADER, strict=True)
            ).rstrip()
        )
    return lines + notes(inv)
