"""What a location holds: one row per namespace, from one listing and its manifests.

Namespaces without a manifest (as vLLM's object-store tier leaves them) are shown too,
named from their folder. Caches nested under deeper prefixes are not part of the location
(:mod:`s3kv.ops.scope`): they are named in ``nested``, with how many namespaces each holds.

``ls`` reads no block, so it cannot tell which blocks carry a recorded checksum: it does
not count ``unverified`` ones (``s3kv verify --deep`` does).

``bytes_by_last_use`` splits a namespace's bytes by time since last use (a block's
``Last-Modified``, which s3kv's vLLM tier renews when it uses a block older than its
``renew_after``, so "last use" is exact to within that): used within the hour, within
the day, within the week, and before. What a lifecycle rule or ``gc --older-than`` would
take is the last bucket(s); what is hot is the first.

Tenants (``<location>/tenants/<tenant>/``, :mod:`s3kv.naming.tenants`) are counted from
the same listing, without reading their manifests (each is its tenant's, and may be
encrypted with its key): ``tenants`` has one row per tenant, its namespaces, blocks and
bytes. A location of tenants only is no empty location.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from s3kv.naming.location import Location, parse_location
from s3kv.naming.namespace import DIGEST_LENGTH
from s3kv.naming.parse import ParsedKey
from s3kv.naming.tenants import is_tenant, tenants_prefix
from s3kv.ops.scope import Census, NestedCache
from s3kv.progress import Meter, ProgressCallback
from s3kv.settings import S3Settings
from s3kv.stores import open_store
from s3kv.transfers.listing import MAX_EXAMPLES, usual_size, walk
from s3kv.transfers.stored_manifest import read_manifest

ManifestState = Literal["present", "missing", "invalid"]

LAST_USE_BUCKETS: tuple[tuple[str, float], ...] = (
    ("within_1h", 3600.0),
    ("1h_to_1d", 86400.0),
    ("1d_to_7d", 7 * 86400.0),
    ("over_7d", float("inf")),
)
"""Buckets of :attr:`NamespaceSummary.bytes_by_last_use`: name and upper bound (seconds)."""


def last_use_bucket(age_seconds: float) -> str:
    """The :data:`LAST_USE_BUCKETS` name for a block last used ``age_seconds`` ago."""
    return next(name for name, limit in LAST_USE_BUCKETS if age_seconds < limit)


@dataclass(frozen=True, slots=True)
class NamespaceSummary:
    """One namespace at a location."""

    prefix: str
    folder: str
    model: str
    """From the manifest; without one, the folder's model part (``/`` shown as ``_``)."""
    dtype: str | None
    tp_size: int | None
    pp_size: int | None
    pcp_size: int | None
    dcp_size: int | None
    ranks: tuple[int, ...]
    blocks: int
    bytes: int
    oldest: datetime | None
    newest: datetime | None
    manifest: ManifestState
    """``present`` (sound), ``missing``, or ``invalid`` (unreadable, or its fields do not
    hash to the folder: ``manifest_problem`` says which)."""
    manifest_problem: str = ""
    styles: tuple[str, ...] = ()
    """Key styles seen: ``s3kv`` (vLLM's filesystem and object-store tiers store one layout)."""
    bytes_by_last_use: dict[str, int] = field(default_factory=dict)
    """Bytes by time since last use, keyed by :data:`LAST_USE_BUCKETS` (every key present)."""
    blocks_by_last_use: dict[str, int] = field(default_factory=dict)
    """Blocks by time since last use, keyed as ``bytes_by_last_use``."""
    block_bytes: int | None = None
    """The namespace's block size: its blocks' most common size (the CPU row stride);
    None without blocks."""
    created: datetime | None = None
    """When s3kv created the manifest (its record in it); None if not recorded: written
    by vLLM or an s3kv before 0.1.0's record, or no manifest."""
    s3kv_version: str | None = None
    """The s3kv that created the manifest; None if not recorded."""
    vllm_version: str | None = None
    """The vLLM whose tier (s3kv's) created the manifest; None if not recorded (also
    for a manifest written by ``push`` or the library without a vLLM)."""


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """One tenant's part of a location (``<location>/tenants/<tenant>``)."""

    tenant: str
    location: str
    namespaces: int
    blocks: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Inventory:
    location: str
    namespaces: tuple[NamespaceSummary, ...]
    stray_keys: int
    stray_examples: tuple[str, ...] = ()
    seconds: float = 0.0
    nested: tuple[NestedCache, ...] = ()
    """Caches nested below the location: not part of it (see :mod:`s3kv.ops.scope`)."""
    tenants: tuple[TenantUsage, ...] = ()
    """The tenants under the location, by id (not part of :attr:`namespaces`)."""
    not_files: tuple[str, ...] = ()
    """A directory's entries that are neither regular files nor folders (symlinks, FIFOs):
    not listed, never followed; each with why (``push`` fails them, ``verify`` finds
    them)."""

    @property
    def blocks(self) -> int:
        return sum(n.blocks for n in self.namespaces)

    @property
    def bytes(self) -> int:
        return sum(n.bytes for n in self.namespaces)


@dataclass
class _Tally:
    ranks: set[int] = field(default_factory=set)
    styles: set[str] = field(default_factory=set)
    blocks: int = 0
    bytes: int = 0
    oldest: datetime | None = None
    newest: datetime | None = None
    manifest: bool = False
    by_last_use: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((n for n, _ in LAST_USE_BUCKETS), 0)
    )
    blocks_by_last_use: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((n for n, _ in LAST_USE_BUCKETS), 0)
    )
    sizes: Counter[int] = field(default_factory=Counter)


def inventory(
    location: str | Location,
    *,
    settings: S3Settings | None = None,
    allow_empty: bool = False,
    on_progress: ProgressCallback | None = None,
    now: datetime | None = None,
) -> Inventory:
    """List the namespaces at ``location`` (one listing, then one GET per manifest).

    Raises :class:`s3kv.NothingMatchedError` when the location holds no namespace
    (unless ``allow_empty`` and nothing at all is there), naming what was meant.
    ``now`` is when time since last use is counted from (default: now).
    """
    loc = location if isinstance(location, Location) else parse_location(location)
    settings = settings if settings is not None else S3Settings.resolve()
    now = now or datetime.now(timezone.utc)
    started = time.perf_counter()
    store = open_store(loc, settings)
    census = Census(loc)
    meter = Meter(on_progress)
    try:
        tallies: dict[tuple[str, str], _Tally] = {}
        tenants: dict[str, _Tally] = {}
        tenant_folders: dict[str, set[str]] = {}
        stray = 0
        examples: list[str] = []
        for entry in walk(store, loc):
            tenant = _tenant(loc, entry.nested)
            if tenant is not None:
                assert entry.nested is not None
                tenant_folders.setdefault(tenant, set()).add(entry.nested.folder)
                tally = tenants.setdefault(tenant, _Tally())
                if entry.nested.kind == "block" and entry.nested.key == entry.info.key:
                    tally.blocks += 1
                    tally.bytes += entry.info.size
                continue
            census.add(entry)
            parsed = entry.parsed
            if parsed is None:
                if entry.temp or entry.nested:  # a write in progress; another location
                    continue
                stray += 1
                if len(examples) < MAX_EXAMPLES:
                    examples.append(entry.info.key)
                continue
            tally = tallies.setdefault((parsed.prefix, parsed.folder), _Tally())
            if parsed.kind == "manifest":
                tally.manifest = True
                continue
            assert parsed.rank is not None
            tally.ranks.add(parsed.rank)
            tally.styles.add(parsed.style)
            tally.blocks += 1
            tally.bytes += entry.info.size
            meter.add(1, entry.info.size)
            when = entry.info.last_modified
            age = float("inf") if when is None else (now - when).total_seconds()
            used = last_use_bucket(max(age, 0.0))
            tally.by_last_use[used] += entry.info.size
            tally.blocks_by_last_use[used] += 1
            tally.sizes[entry.info.size] += 1
            if when is not None:
                tally.oldest = when if tally.oldest is None else min(tally.oldest, when)
                tally.newest = when if tally.newest is None else max(tally.newest, when)
        census.check(store, allow_empty=allow_empty or bool(tenants))
        rows = []
        for (prefix, folder), tally in sorted(tallies.items()):
            manifest = read_manifest(store, prefix, folder, settings) if tally.manifest else None
            ns = manifest.namespace if manifest is not None else None
            record = manifest.provenance if manifest is not None else None
            rows.append(
                NamespaceSummary(
                    prefix=prefix,
                    folder=folder,
                    model=ns.model_name if ns is not None else folder[: -(DIGEST_LENGTH + 1)],
                    dtype=ns.dtype if ns is not None else None,
                    tp_size=ns.tp_size if ns is not None else None,
                    pp_size=ns.pp_size if ns is not None else None,
                    pcp_size=ns.pcp_size if ns is not None else None,
                    dcp_size=ns.dcp_size if ns is not None else None,
                    ranks=tuple(sorted(tally.ranks)),
                    blocks=tally.blocks,
                    bytes=tally.bytes,
                    oldest=tally.oldest,
                    newest=tally.newest,
                    manifest=(
                        "missing"
                        if manifest is None
                        else ("invalid" if manifest.problem else "present")
                    ),
                    manifest_problem=manifest.problem if manifest is not None else "",
                    styles=tuple(sorted(tally.styles)),
                    bytes_by_last_use=dict(tally.by_last_use),
                    blocks_by_last_use=dict(tally.blocks_by_last_use),
                    block_bytes=usual_size(tally.sizes),
                    created=record.created if record else None,
                    s3kv_version=record.s3kv_version if record else None,
                    vllm_version=record.vllm_version if record else None,
                )
            )
        not_files = tuple(census.not_files(store).values())
    finally:
        store.close()
    return Inventory(
        loc.url,
        tuple(rows),
        stray,
        tuple(examples),
        time.perf_counter() - started,
        census.nested_caches(),
        tuple(
            TenantUsage(t, loc.for_tenant(t).url, len(tenant_folders[t]), n.blocks, n.bytes)
            for t, n in sorted(tenants.items())
        ),
        not_files,
    )


def _tenant(loc: Location, nested: ParsedKey | None) -> str | None:
    """The tenant whose part of ``loc`` (``<loc>/tenants/<tenant>``) holds a key of a
    nested cache; None for any other key."""
    if nested is None:
        return None
    root = tenants_prefix(loc.prefix)
    tenant = nested.prefix.removeprefix(root) if nested.prefix.startswith(root) else ""
    return tenant if is_tenant(tenant) else None
