"""Repairing a location: blocks that fail their check, replaced from a good copy or removed.

``repair`` reads every block at a location (as ``verify --deep``) and judges it
(:mod:`s3kv.ops.damage`): empty, another size than its namespace and rank's usual one, bytes
that do not match the checksum recorded with them, or, for a block that records none,
bytes that differ from ``source``'s copy whose recorded checksum is known. A damaged
block is replaced by ``source``'s block at the same path when that one passes its own
check; otherwise it is *unrepairable*: removed with ``remove_unrepairable``, else left
and reported. Nothing else is ever written: blocks that pass are not touched, and a
block a writer changed since it was judged is left alone (``changed``). ``dry_run``
judges everything and writes nothing.

Both locations are listed first (:class:`s3kv.ops.scope.Census`): a location or source that
holds nothing, or a filter that matches nothing, stops the run before any block is read
(a mistyped source must never make every damaged block look unrepairable).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from s3kv.errors import ObjectNotFoundError, S3KVError
from s3kv.naming.location import Location, parse_location
from s3kv.naming.parse import ParsedKey
from s3kv.ops import damage
from s3kv.ops.scope import Census, NestedCache
from s3kv.ops.verify import tag_problem
from s3kv.progress import Meter, ProgressCallback
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import Store, open_store
from s3kv.transfers.listing import MAX_EXAMPLES, root_of, usual_size, walk
from s3kv.transfers.transfer import BLOCK_TAGS

Action = Literal[
    "replaced",
    "would-replace",
    "removed",
    "would-remove",
    "unrepairable",
    "changed",
    "failed",
    "tagged",
    "would-tag",
]
MAX_ACTIONS_KEPT = 1000
"""Damaged blocks named in a report (all are counted)."""


@dataclass(frozen=True, slots=True)
class BlockRepair:
    """A damaged block and what was done about it."""

    key: str
    problem: str
    action: Action


@dataclass(frozen=True, slots=True)
class RepairReport:
    location: str
    source: str | None
    checked: int
    damaged: int
    replaced: int
    """Damaged blocks replaced from the source (would be, in a dry run)."""
    removed: int
    """Unrepairable blocks removed (would be, in a dry run)."""
    unrepairable: int
    """Damaged, no good copy, left in place (no ``remove_unrepairable``)."""
    changed: int
    """Damaged when judged, changed by someone else before the repair: left alone."""
    failed: int
    unverified: int
    """Blocks read from S3 that record no checksum and had no verified copy to compare
    with: size-checked only."""
    bytes_read: int
    blocks: tuple[BlockRepair, ...] = ()
    failures: Mapping[str, str] = field(default_factory=dict)
    dry_run: bool = False
    seconds: float = 0.0
    stray_keys: int = 0
    nested: tuple[NestedCache, ...] = ()
    tagged: int | None = None
    """``tags``: blocks the lifecycle rule could not see (no block tag, or another
    value), tagged (would be, in a dry run); None without ``tags``."""

    @property
    def ok(self) -> bool:
        """Nothing is left damaged (a dry run: nothing was found damaged)."""
        if self.dry_run:
            return self.damaged == 0 and self.failed == 0 and not self.tagged
        return self.unrepairable == 0 and self.changed == 0 and self.failed == 0


def repair(
    location: str | os.PathLike[str] | Location,
    source: str | os.PathLike[str] | Location | None = None,
    *,
    settings: S3Settings | None = None,
    source_settings: S3Settings | None = None,
    remove_unrepairable: bool = False,
    dry_run: bool = False,
    namespaces: tuple[str, ...] = (),
    ranks: tuple[int, ...] = (),
    allow_empty: bool = False,
    on_progress: ProgressCallback | None = None,
    tags: bool = False,
) -> RepairReport:
    """Replace (from ``source``) or remove the blocks at ``location`` that fail their check;
    with ``tags``, also tag the blocks the lifecycle rule cannot see."""
    loc = location if isinstance(location, Location) else parse_location(location)
    settings = settings if settings is not None else S3Settings.resolve()
    src_loc = None
    if source is not None:
        src_loc = source if isinstance(source, Location) else parse_location(source)
    store = open_store(loc, settings)
    src = open_store(src_loc, source_settings or settings) if src_loc is not None else None
    try:
        job = _Repair(loc, store, settings, src_loc, src, source_settings or settings)
        job.census = Census(loc, namespaces=namespaces, ranks=ranks)
        job.remove_unrepairable, job.dry_run = remove_unrepairable, dry_run
        job.tags = tags and settings.tag_blocks and store.has_tags
        meter = Meter(on_progress, dry_run=dry_run)
        try:
            return job.run(allow_empty, meter)
        finally:
            meter.finish()  # a last event, Ctrl-C too: what an interrupt reports
    finally:
        store.close()
        if src is not None:
            src.close()


class _Repair:
    def __init__(
        self,
        loc: Location,
        store: Store,
        settings: S3Settings,
        src_loc: Location | None,
        src: Store | None,
        src_settings: S3Settings,
    ) -> None:
        self.loc, self.store, self.settings = loc, store, settings
        self.src_loc, self.src, self.src_settings = src_loc, src, src_settings
        self.census = Census(loc)
        self.remove_unrepairable = self.dry_run = False
        self.meter = Meter(None)
        """Set by :meth:`run`."""
        self.sizes: dict[tuple[str, int], Counter[int]] = {}
        self.counts: Counter[str] = Counter()
        self.actions: list[BlockRepair] = []
        self.failures: dict[str, str] = {}
        self.lock = threading.Lock()
        self.records_checksums = store.records_checksums
        self.tags = False

    def run(self, allow_empty: bool, meter: Meter) -> RepairReport:
        started = time.perf_counter()
        self.meter = meter
        stray = 0
        for entry in walk(self.store, self.loc):
            if self.census.add(entry) and entry.parsed and entry.parsed.kind == "block":
                assert entry.parsed.rank is not None
                rank = (entry.parsed.folder, entry.parsed.rank)
                self.sizes.setdefault(rank, Counter())[entry.info.size] += 1
                self.meter.add(1, entry.info.size)
            elif entry.parsed is None and entry.nested is None and not entry.temp:
                stray += 1
        self.census.check(self.store, allow_empty=allow_empty)
        if self.src is not None and self.src_loc is not None:
            self._check_source()
        usual = {rank: usual_size(sizes) for rank, sizes in self.sizes.items()}
        self.meter.start("checking", blocks=self.census.blocks, nbytes=self.census.bytes)
        concurrency = self.settings.concurrency
        slots = threading.BoundedSemaphore(concurrency * 2)
        with ThreadPoolExecutor(concurrency, thread_name_prefix="s3kv-repair") as pool:
            for entry in walk(self.store, self.loc):
                parsed = entry.parsed
                if parsed is None or parsed.kind != "block" or not self.census.wants(parsed):
                    continue
                assert parsed.rank is not None
                slots.acquire()
                usual_here = usual.get((parsed.folder, parsed.rank))
                future = pool.submit(self._one, entry.info.key, entry.info.size, parsed, usual_here)
                future.add_done_callback(lambda _: slots.release())
        self.meter.finish()
        c = self.counts
        return RepairReport(
            location=self.loc.url,
            source=self.src_loc.url if self.src_loc is not None else None,
            checked=c["checked"],
            damaged=c["damaged"],
            replaced=c["replaced"] + c["would-replace"],
            removed=c["removed"] + c["would-remove"],
            unrepairable=c["unrepairable"],
            changed=c["changed"],
            failed=c["failed"],
            unverified=c["unverified"],
            bytes_read=c["bytes"],
            blocks=tuple(sorted(self.actions, key=lambda a: a.key)),
            failures=dict(self.failures),
            dry_run=self.dry_run,
            seconds=time.perf_counter() - started,
            stray_keys=stray,
            nested=self.census.nested_caches(),
            tagged=c["tagged"] + c["would-tag"] if self.tags else None,
        )

    def _check_source(self) -> None:
        """The source must hold the namespaces asked for: a mistyped one would make every
        damaged block look unrepairable."""
        assert self.src is not None and self.src_loc is not None
        census = Census(self.src_loc, namespaces=self.census.wanted_namespaces)
        for entry in walk(self.src, self.src_loc):
            census.add(entry)
        census.check(self.src)

    def _one(self, key: str, size: int, parsed: ParsedKey, usual: int | None) -> None:
        where = self.loc.url_for(key)
        try:
            judged = damage.judge(self.store, key, self.settings, usual=usual)
            self._count("checked", nbytes=len(judged.data))
            src_key = root_of(self.src_loc.prefix) + parsed.relative_path if self.src_loc else ""
            if not judged.damaged and judged.info.checksum is None:
                judged = self._compare(judged, src_key, usual)
            if judged.damaged:
                self._count("damaged")
                self._act(judged, src_key, usual)
            if self.tags and not judged.damaged:  # a replacement is written with its tag
                self._tag(judged)
        except S3KVError as exc:
            self._count("failed")
            with self.lock:
                if len(self.failures) < MAX_EXAMPLES * 10:
                    self.failures[where] = str(exc)
        finally:
            self.meter.add(1, size)

    def _compare(self, judged: damage.Judged, src_key: str, usual: int | None) -> damage.Judged:
        """A block without a recorded checksum, against the source's recorded one."""
        info = None
        if self.src is not None:
            src = self.src
            info = with_retries(lambda: src.head(src_key), self.src_settings)
        if info is None or info.checksum is None:
            if self.records_checksums:
                self._count("unverified")
            return judged
        reference = info.checksum
        problem = damage.problem_with(judged.data, judged.info, usual=usual, reference=reference)
        return damage.Judged(judged.key, judged.data, judged.info, problem)

    def _act(self, judged: damage.Judged, src_key: str, usual: int | None) -> None:
        why = "no --from source to copy from"
        good: damage.Judged | None = None
        if self.src is not None:
            try:
                good = damage.judge(self.src, src_key, self.src_settings, usual=usual)
            except ObjectNotFoundError:
                why = "no copy at the source"
            if good is not None and good.damaged:
                why, good = f"the source's copy fails its check too ({good.problem})", None
        action: Action
        if good is not None:
            if self.dry_run:
                action = "would-replace"
            else:
                done = damage.replace(self.store, judged, good, self.settings)
                action = "replaced" if done else "changed"
            self._record(judged, action)
            return
        if not self.remove_unrepairable:
            action = "unrepairable"
        elif self.dry_run:
            action = "would-remove"
        else:
            action = "removed" if damage.remove(self.store, judged, self.settings) else "changed"
        self._record(judged, action, f"{judged.problem}; {why}")

    def _tag(self, judged: damage.Judged) -> None:
        """The block tag the lifecycle rule filters on, put back where it is missing."""
        key = judged.key
        tags = with_retries(lambda: self.store.get_tags(key), self.settings)
        problem = tag_problem(tags) if tags is not None else None
        if problem is None:
            return
        if self.dry_run:
            self._record(judged, "would-tag", problem[1])
            return
        try:
            with_retries(lambda: self.store.put_tags(key, BLOCK_TAGS), self.settings)
        except ObjectNotFoundError:  # removed meanwhile: nothing left to tag
            self._record(judged, "changed", problem[1])
            return
        self._record(judged, "tagged", problem[1])

    def _record(self, judged: damage.Judged, action: Action, problem: str = "") -> None:
        self._count(action)
        with self.lock:
            if len(self.actions) < MAX_ACTIONS_KEPT:
                key = self.loc.url_for(judged.key)
                self.actions.append(BlockRepair(key, problem or judged.problem, action))

    def _count(self, what: str, *, nbytes: int = 0) -> None:
        with self.lock:
            self.counts[what] += 1
            self.counts["bytes"] += nbytes
