"""``s3kv ls``'s tables: one line per namespace, as wide as the terminal (100 at least).

Sizes and ages are human (``8.0 MiB``, ``3d..2m``). On a terminal, a folder name too long
for what the other columns leave is cut in the middle, keeping the model's start and the
digest; into a file or a pipe (``width=None``) nothing is cut. A second table splits each
namespace's bytes by time since last use (what a lifecycle rule or ``gc --older-than``
would take sits on the right); a third gives the block size and who created each
manifest (s3kv's record in it: when, which s3kv, which vLLM; ``-`` where not recorded).
A location with tenants gets one more: each tenant's namespaces, blocks and size.
What is unusual (no manifest, a bad one) goes in notes below the tables, not a column.
``--json`` carries every field unabridged.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from s3kv.naming.location import parse_location
from s3kv.ops.inventory import LAST_USE_BUCKETS, Inventory, NamespaceSummary
from s3kv.units import elide_middle, format_age, format_bytes

WIDTH = 100
GAP = "  "
MIN_FOLDER = 20
HEADER = ("FOLDER", "DTYPE", "TP/PP/PCP/DCP", "RANKS", "BLOCKS", "SIZE", "AGE")
RIGHT = {"BLOCKS", "SIZE"}  # numbers line up on the right
LAST_USE_HEADER = ("LAST USED", "<1h", "1h-1d", "1d-7d", ">7d")
WRITTEN_HEADER = ("WRITTEN", "BLOCK SIZE", "CREATED (UTC)", "S3KV", "VLLM")
TENANTS_HEADER = ("TENANT", "NAMESPACES", "BLOCKS", "SIZE")
assert len(LAST_USE_HEADER) == len(LAST_USE_BUCKETS) + 1


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


def written_row(ns: NamespaceSummary, under: str) -> tuple[str, ...]:
    """Block size, and when and by which s3kv and vLLM the manifest was created."""
    block = format_bytes(ns.block_bytes) if ns.block_bytes is not None else "-"
    created = ns.created.strftime("%Y-%m-%d %H:%M") if ns.created is not None else "-"
    return (
        folder_text(ns, under),
        block,
        created,
        ns.s3kv_version or "-",
        ns.vllm_version or "-",
    )


def render(
    inv: Inventory, *, now: datetime | None = None, width: int | None = WIDTH
) -> list[str]:
    """The tables' lines, then the notes; every table line fits ``width`` (None: no
    limit, nothing cut)."""
    now = now or datetime.now(timezone.utc)
    under = parse_location(inv.location).prefix.rstrip("/")
    lines: list[str] = []
    folder_width: int | None = None
    if inv.namespaces or not inv.tenants:
        rows = [HEADER, *(row(ns, now, under) for ns in inv.namespaces)]
        lines, folder_width = _table(rows, width, right=lambda i: HEADER[i] in RIGHT)
    if inv.tenants:
        tenants: list[tuple[str, ...]] = [TENANTS_HEADER]
        tenants += [
            (t.tenant, f"{t.namespaces:,}", f"{t.blocks:,}", format_bytes(t.bytes))
            for t in inv.tenants
        ]
        more, _ = _table(tenants, width, right=lambda i: i > 0)
        lines += ["", *more] if lines else more
    if inv.namespaces:
        used = [LAST_USE_HEADER] + [
            (
                folder_text(ns, under),
                *(format_bytes(ns.bytes_by_last_use.get(b, 0)) for b, _ in LAST_USE_BUCKETS),
            )
            for ns in inv.namespaces
        ]
        more, _ = _table(used, width, right=lambda i: i > 0, folder_width=folder_width)
        lines += ["", *more]
        written = [WRITTEN_HEADER] + [written_row(ns, under) for ns in inv.namespaces]
        more, _ = _table(written, width, right=lambda i: i == 1, folder_width=folder_width)
        lines += ["", *more]
    return lines + notes(inv)


def _table(
    rows: list[tuple[str, ...]],
    width: int | None,
    *,
    right: Callable[[int], bool],
    folder_width: int | None = None,
) -> tuple[list[str], int]:
    """Rows as aligned columns, and the first column's width: the folder, cut in the
    middle to fit ``width`` (or to ``folder_width``, to match another table)."""
    columns = len(rows[0])
    widths = [max(len(r[i]) for r in rows) for i in range(columns)]
    if width is not None:
        room = width - sum(widths[1:]) - len(GAP) * (columns - 1)
        widths[0] = max(min(widths[0], room, folder_width or room), MIN_FOLDER)
    elif folder_width is not None:
        widths[0] = folder_width
    lines = []
    for r in rows:
        cells = [elide_middle(r[0], widths[0]), *r[1:]]
        lines.append(
            GAP.join(
                c.rjust(w) if right(i) else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )
    return lines, widths[0]
