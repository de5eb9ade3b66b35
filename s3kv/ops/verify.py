"""Checking a location: manifests, key layout, block sizes and (``deep``) checksums.

One listing gives keys and sizes: every key must parse; every manifest must hash to its
folder's digest; blocks of one namespace and rank are rows of one CPU-tier tensor, so
they share a size, and a block of another size (fewer than the majority) is short or
corrupt. ``deep`` reads every block and checks the checksum recorded when it was stored.
Blocks of a namespace without a manifest are orphans. A 0-byte block is never valid.
A temp file of a write that died before its rename (older than
:data:`~s3kv.transfers.listing.STALE_TEMP_SECONDS`) is a ``stale-temp`` finding, which ``s3kv gc``
removes; a younger one is a write in progress and is left alone.

The location means what it means for every command (:mod:`s3kv.ops.scope`): a location that
holds no namespace is an error naming what was probably meant (``allow_empty`` accepts
one with nothing at all under it). ``deep`` lists first (every check above), then reads
the blocks with their count and bytes known, so progress has a total. A deep read takes
never more bytes than listed, and a block larger than its rank's usual size is not read
at all (its ``size-mismatch`` finding says enough). A checksum mismatch is read once
more before it is a finding: one on the wire only is not blamed on the object.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

import s3kv.integrity as integrity
from s3kv.errors import IntegrityError, S3KVError
from s3kv.naming.location import Location, parse_location
from s3kv.ops.scope import Census, NestedCache
from s3kv.progress import Meter, ProgressCallback
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import ObjectInfo, Store, open_store
from s3kv.transfers.listing import STALE_TEMP_SECONDS, usual_size, walk
from s3kv.transfers.stored_manifest import read_manifest
from s3kv.transfers.transfer import BLOCK_TAGS

FindingKind = Literal[
    "stray-key",
    "manifest-invalid",
    "manifest-mismatch",
    "orphan",
    "size-mismatch",
    "checksum-mismatch",
    "read-failed",
    "stale-temp",
    "untagged",
    "wrong-tag",
    "not-a-file",
]
MAX_FINDINGS_PER_KIND = 1000
"""Findings of one kind kept by name in a report (all are counted)."""
MAX_KEYS_PER_SIZE = 10_000
"""Keys remembered per (namespace, rank, size) to name the odd-sized ones at the end."""


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    key: str
    message: str


@dataclass(frozen=True, slots=True)
class NamespaceCheck:
    """One namespace as ``verify`` saw it."""

    folder: str
    blocks: int
    manifest: Literal["present", "missing", "invalid"]


@dataclass(frozen=True, slots=True)
class VerifyReport:
    location: str
    namespaces: int
    blocks: int
    findings: tuple[Finding, ...]
    counts: dict[str, int] = field(default_factory=dict)
    """Findings per kind (including those not kept by name)."""
    deep: bool = False
    blocks_read: int = 0
    bytes_read: int = 0
    unverified: int | None = None
    """Deep: blocks read from S3 without a recorded checksum, so size-checked only (a
    directory records none by design: its blocks are not counted). None without
    ``deep``: no block was read, so it is not known."""
    seconds: float = 0.0
    nested: tuple[NestedCache, ...] = ()
    """Caches nested below the location: not part of it, not checked."""
    folders: tuple[NamespaceCheck, ...] = ()
    stray_keys: int = 0
    tags_checked: int | None = None
    """``tags``: blocks whose tags were read (None: not asked, or a store without tags)."""

    @property
    def ok(self) -> bool:
        return not self.counts


@dataclass
class _Rank:
    sizes: Counter[int] = field(default_factory=Counter)
    keys: dict[int, list[str]] = field(default_factory=dict)


@dataclass
class _Namespace:
    manifests: list[str] = field(default_factory=list)
    """Manifest keys as listed (both key styles may hold one)."""
    blocks: int = 0
    ranks: dict[int, _Rank] = field(default_factory=dict)


def verify(
    location: str | Location,
    *,
    settings: S3Settings | None = None,
    deep: bool = False,
    concurrency: int | None = None,
    allow_empty: bool = False,
    on_progress: ProgressCallback | None = None,
    tags: bool = False,
) -> VerifyReport:
    """Check everything at ``location``; see the module docstring for what is checked."""
    loc = location if isinstance(location, Location) else parse_location(location)
    settings = settings if settings is not None else S3Settings.resolve()
    store = open_store(loc, settings)
    try:
        job = _Verify(loc, store, settings, deep, concurrency or settings.concurrency)
        job.tags = tags and settings.tag_blocks and store.has_tags
        meter = Meter(on_progress)
        try:
            return job.run(allow_empty, meter)
        finally:
            meter.finish()  # a last event, Ctrl-C too: what an interrupt reports
    finally:
        store.close()


class _Verify:
    def __init__(
        self, loc: Location, store: Store, settings: S3Settings, deep: bool, concurrency: int
    ) -> None:
        self.loc, self.store, self.settings, self.deep = loc, store, settings, deep
        self.meter = Meter(None)
        self.census = Census(loc)
        self.records_checksums = store.records_checksums
        self.findings: list[Finding] = []
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.read = self.read_bytes = self.unverified = 0
        self.concurrency = concurrency
        self.slots = threading.BoundedSemaphore(concurrency * 2)
        self.tags = False
        self.tags_checked = 0

    def add(self, kind: FindingKind, key: str, message: str) -> None:
        with self.lock:
            self.counts[kind] += 1
            if self.counts[kind] <= MAX_FINDINGS_PER_KIND:
                self.findings.append(Finding(kind, key, message))

    def run(self, allow_empty: bool, meter: Meter) -> VerifyReport:
        started = time.perf_counter()
        self.meter = meter
        spaces: dict[str, _Namespace] = {}
        blocks = total_bytes = stray = 0
        for entry in walk(self.store, self.loc):
            self.census.add(entry)
            parsed = entry.parsed
            if parsed is None:
                if entry.temp:
                    self._temp(entry.info)
                elif entry.nested is None:  # a nested cache is another location's
                    stray += 1
                    self.add("stray-key", entry.info.key, entry.reason)
                continue
            ns = spaces.setdefault(parsed.folder, _Namespace())
            if parsed.kind == "manifest":
                ns.manifests.append(entry.info.key)
                continue
            assert parsed.rank is not None
            blocks += 1
            ns.blocks += 1
            rank = ns.ranks.setdefault(parsed.rank, _Rank())
            size = entry.info.size
            total_bytes += size
            rank.sizes[size] += 1
            keys = rank.keys.setdefault(size, [])
            if len(keys) < MAX_KEYS_PER_SIZE:
                keys.append(entry.info.key)
            self.meter.add(1, size)
        self.census.check(self.store, allow_empty=allow_empty)
        for key, why in self.census.not_files(self.store).items():  # a directory's links
            self.add("not-a-file", key, why)
        folders = tuple(
            self._check_namespace(self.loc.prefix, folder, ns)
            for folder, ns in sorted(spaces.items())
        )
        if self.deep:
            self.meter.start("checking", blocks=blocks, nbytes=total_bytes)
            self._read_all(spaces)
        if self.tags:
            self.meter.start("checking", blocks=blocks, nbytes=0)
            self._check_tags()
        self.meter.finish()
        return VerifyReport(
            location=self.loc.url,
            namespaces=len(spaces),
            blocks=blocks,
            findings=tuple(sorted(self.findings, key=lambda f: (f.kind, f.key))),
            counts=dict(self.counts),
            deep=self.deep,
            blocks_read=self.read,
            bytes_read=self.read_bytes,
            unverified=self.unverified if self.deep else None,
            seconds=time.perf_counter() - started,
            nested=self.census.nested_caches(),
            folders=folders,
            stray_keys=stray,
            tags_checked=self.tags_checked if self.tags else None,
        )

    def _read_all(self, spaces: dict[str, _Namespace]) -> None:
        """Read every block of the location, a bounded number at a time; none larger
        than its rank's usual size (a size-mismatch finding, never read into memory)."""
        usual = {
            (folder, rank_no): usual_size(rank.sizes)
            for folder, ns in spaces.items()
            for rank_no, rank in ns.ranks.items()
        }
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="s3kv-verify") as pool:
            for entry in walk(self.store, self.loc):
                parsed = entry.parsed
                if parsed is None or parsed.kind != "block" or parsed.rank is None:
                    continue
                limit = usual.get((parsed.folder, parsed.rank))
                if limit is not None and entry.info.size > limit:
                    self.meter.add(1)
                    continue
                self.slots.acquire()
                future = pool.submit(self._read, entry.info.key, entry.info.size)
                future.add_done_callback(lambda _: self.slots.release())

    def _check_tags(self) -> None:
        """Every block must carry the block tag the lifecycle rule filters on (one
        GetObjectTagging each): without it a block never expires."""
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="s3kv-verify") as pool:
            for entry in walk(self.store, self.loc):
                parsed = entry.parsed
                if parsed is None or parsed.kind != "block":
                    continue
                self.slots.acquire()
                future = pool.submit(self._tag_of, entry.info.key)
                future.add_done_callback(lambda _: self.slots.release())

    def _tag_of(self, key: str) -> None:
        try:
            tags = with_retries(lambda: self.store.get_tags(key), self.settings)
        except S3KVError as exc:
            self.add("read-failed", key, f"tags: {exc}")
            self.meter.add(1)
            return
        if tags is None:  # a store without tags (a directory): nothing to see
            self.meter.add(1)
            return
        with self.lock:
            self.tags_checked += 1
        problem = tag_problem(tags)
        if problem is not None:
            kind, message = problem
            self.add(kind, key, message)
        self.meter.add(1)

    def _check_namespace(self, prefix: str, folder: str, ns: _Namespace) -> NamespaceCheck:
        where = f"{prefix}/{folder}" if prefix else folder
        state: Literal["present", "missing", "invalid"] = (
            "present" if ns.manifests else "missing"
        )
        # Each manifest as listed: the key pull would read is one of them.
        for key in ns.manifests:
            manifest = read_manifest(self.store, prefix, folder, self.settings, key=key)
            if manifest is not None and manifest.problem:
                kind: FindingKind = (
                    "manifest-invalid" if manifest.namespace is None else "manifest-mismatch"
                )
                self.add(kind, manifest.key, manifest.problem)
                state = "invalid"
        if not ns.manifests and ns.blocks:
            self.add(
                "orphan",
                where,
                (
                    f"{ns.blocks} block(s) of namespace {folder} and no {folder}/config.json: "
                    "vLLM's object-store tier writes none; anything else lost it (push again "
                    "from a tree that has it)"
                ),
            )
        for rank_no, rank in sorted(ns.ranks.items()):
            for key in rank.keys.get(0, []):
                self.add("size-mismatch", key, "0 bytes: never a valid block")
            usual = usual_size(rank.sizes)
            if usual is None or len(rank.sizes) - (0 in rank.sizes) < 2:
                continue
            count = rank.sizes[usual]
            for size, keys in sorted(rank.keys.items()):
                if size in (usual, 0):
                    continue
                for key in keys:
                    self.add(
                        "size-mismatch",
                        key,
                        (
                            f"{size} bytes, but {count} other block(s) of {folder} rank "
                            f"{rank_no} are {usual} bytes: a short or foreign object"
                        ),
                    )
        return NamespaceCheck(folder, ns.blocks, state)

    def _temp(self, info: ObjectInfo) -> None:
        when = info.last_modified
        if when is not None and (datetime.now(timezone.utc) - when).total_seconds() > (
            STALE_TEMP_SECONDS
        ):
            self.add(
                "stale-temp",
                info.key,
                "temp file of a write that died before its rename; 's3kv gc' removes it",
            )

    def _read(self, key: str, size: int) -> None:
        where = self.loc.url_for(key)

        def read() -> tuple[bytes, ObjectInfo]:
            return with_retries(lambda: self.store.get(key, max_bytes=size), self.settings)

        try:
            data, info = read()
            if info.checksum is not None:
                integrity.verified(info.checksum, data, lambda: read()[0], where=where)
        except IntegrityError as exc:
            self.add("checksum-mismatch", key, str(exc))
            self.meter.add(1)
            return
        except S3KVError as exc:
            self.add("read-failed", key, str(exc))
            self.meter.add(1)
            return
        with self.lock:
            self.read += 1
            self.read_bytes += len(data)
            if info.checksum is None and self.records_checksums:
                self.unverified += 1
        self.meter.add(1, len(data), len(data))


def tag_problem(tags: dict[str, str]) -> tuple[FindingKind, str] | None:
    """Why a block's tags hide it from the lifecycle rule (None: they do not)."""
    ((name, value),) = BLOCK_TAGS.items()
    if tags.get(name) == value:
        return None
    if name in tags:
        return "wrong-tag", (
            f"tagged {name}={tags[name]}, not {name}={value}: the lifecycle rule cannot "
            "see it, so it never expires; 's3kv repair --tags' tags it"
        )
    return "untagged", (
        f"no {name}={value} tag (written by another tool, or a renewal's re-tag failed): "
        "the lifecycle rule cannot see it, so it never expires; 's3kv repair --tags' tags it"
    )
