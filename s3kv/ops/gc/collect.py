"""Collecting garbage: blocks by time since last use, or least recently used first.

A block's ``Last-Modified`` is its last use where the writers renew what they use
(s3kv's vLLM tier does, :mod:`s3kv.ops.gc.renewal`), else its write time. Only parsed block keys
are ever deleted (stray keys are left alone), in batches of up to 1,000 keys per
request, as the listing streams by: memory stays flat but for the blocks near the
cutoff.

Far from the cutoff, ``Last-Modified`` decides. Near it, blocks are decided as chains
and looked at again right before their deletes (:mod:`s3kv.ops.gc.window`): within
``chain_window`` seconds of the ``older_than`` age, and within ``chain_window`` of the
minute a ``max_bytes`` budget cuts through (at least that minute). The window should be
the writers' ``renew_after`` (1 day by default): renewal keeps a used chain's blocks
within that of each other, so no chain reaches across it.

``max_bytes`` needs the ages of all blocks before the first delete, so it lists twice:
the first pass builds a histogram of bytes per minute of ``Last-Modified`` (small
whatever the block count), which gives the cutoff minute; the second deletes the blocks
of minutes before the window as they stream by, keeps those after it, and sets the
window's aside to be decided as chains (memory: the window's blocks).

Deletes carry the ETag the listing gave (:meth:`Store.delete_if_unchanged`): where the
store checks it (AWS; a directory always knows), a block that vanished or changed since
the listing is counted ``already_gone``, not freed. One gc deletes at a time per location
(:mod:`s3kv.ops.gc.lease`, on the store's clock), checked before every delete batch, so two
runs never both claim one free. In a versioned bucket a delete frees nothing: what stays
stored is reported, and removed on request (:mod:`s3kv.ops.gc.versions`).

Manifests: never deleted by default. vLLM and s3kv write a namespace's manifest once,
before its first block; deleting it while a writer runs would orphan that writer's new
blocks. With ``delete_empty_manifests`` a manifest goes only when its namespace has no
block left at all, in any rank, after this run (:mod:`s3kv.ops.gc.manifests`).
``blocks_deleted`` and ``bytes_freed`` count confirmed deletes only; failures are listed.
Incomplete multipart uploads older than ``uploads_older_than`` seconds are aborted.

Temp files of writes that died between write and rename (``<block>.bin_<token>.tmp``,
older than :data:`~s3kv.transfers.listing.STALE_TEMP_SECONDS`) are never data: every run removes
them, whatever the age or budget asked for. Younger ones are writes in progress.

The location means what it means for every command (:mod:`s3kv.ops.scope`): caches nested
below it are not touched, and a location that holds no namespace is an error naming what
was probably meant (``allow_empty`` accepts one with nothing at all under it); with
``max_bytes`` the check runs on the first pass, before anything is deleted.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from s3kv.errors import InvalidInputError, S3KVError
from s3kv.naming.location import Location, parse_location
from s3kv.ops.gc import versions as gc_versions
from s3kv.ops.gc.lease import GCLease, release_and_close
from s3kv.ops.gc.manifests import EmptyManifests
from s3kv.ops.gc.window import Near, Window
from s3kv.ops.scope import Census, NestedCache
from s3kv.progress import Meter, ProgressCallback
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import MultipartUpload, Store, open_store
from s3kv.stores.base import DELETE_BATCH
from s3kv.transfers.listing import STALE_TEMP_SECONDS, Entry, list_root, walk

DEFAULT_UPLOADS_OLDER_THAN = 24 * 3600.0
DEFAULT_CHAIN_WINDOW = 86_400.0
"""Near the cutoff within this (the tier's default ``renew_after``), blocks are decided
as chains: one HEAD each (see the module)."""
MAX_AGE_SECONDS = 1000 * 365 * 86400.0
"""The longest age gc takes (1,000 years): older cutoffs fall before any timestamp."""
_MINUTE = 60


@dataclass(frozen=True, slots=True)
class GCReport:
    location: str
    blocks_deleted: int
    bytes_freed: int
    """Bytes no longer stored: of the blocks deleted, and of noncurrent versions removed.
    In a versioned bucket a deleted block stays stored as a noncurrent version (counted
    in ``noncurrent_bytes``), so only removed versions count."""
    blocks_kept: int
    bytes_kept: int
    manifests_deleted: int = 0
    uploads_aborted: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    seconds: float = 0.0
    stray_keys: int = 0
    delete_requests: int = 0
    temp_files_deleted: int = 0
    nested: tuple[NestedCache, ...] = ()
    """Caches nested below the location: not part of it, never touched."""
    already_gone: int = 0
    """Blocks the store said were no longer there (or no longer the object listed) when
    deleted: removed by someone else since the listing, so not freed by this run."""
    manifests_restored: int = 0
    """Manifests written back because a writer stored a block while gc deleted them."""
    head_requests: int = 0
    """HEADs of blocks near the cutoff: their chains read, and each looked at again
    right before its delete (:mod:`s3kv.ops.gc.window`)."""
    used_since_listed: int = 0
    """Blocks near the cutoff used (renewed) after the listing: kept, with their chains."""
    versioning: str | None = None
    """The bucket's versioning (``Enabled``, ``Suspended``, ``unknown``); None: off."""
    noncurrent_versions: int = 0
    """Noncurrent versions of the location's blocks still stored after the run."""
    noncurrent_bytes: int = 0
    noncurrent_versions_deleted: int = 0
    """Removed (``delete_noncurrent_versions``; would be, in a dry run)."""

    @property
    def ok(self) -> bool:
        return not self.failures


def gc(
    location: str | Location,
    *,
    older_than: float | None = None,
    max_bytes: int | None = None,
    uploads_older_than: float = DEFAULT_UPLOADS_OLDER_THAN,
    delete_empty_manifests: bool = False,
    delete_noncurrent_versions: bool = False,
    chain_window: float = DEFAULT_CHAIN_WINDOW,
    dry_run: bool = False,
    now: datetime | None = None,
    settings: S3Settings | None = None,
    allow_empty: bool = False,
    on_progress: ProgressCallback | None = None,
) -> GCReport:
    """Delete blocks older than ``older_than`` seconds and/or beyond ``max_bytes``."""
    if older_than is None and max_bytes is None:
        raise InvalidInputError("gc needs --older-than or --max-bytes (or both)")
    if max_bytes is not None and max_bytes < 0:
        raise InvalidInputError("--max-bytes must not be negative")
    for flag, seconds in (
        ("--older-than", older_than),
        ("--abort-uploads-older-than", uploads_older_than),
        ("--chain-window", chain_window),
    ):
        if seconds is not None and not 0 <= seconds <= MAX_AGE_SECONDS:
            raise InvalidInputError(
                f"{flag} {seconds:g}s is out of range; give 0 to {MAX_AGE_SECONDS // 86400:.0f} "
                "days (e.g. 7d, 2w)"
            )
    loc = location if isinstance(location, Location) else parse_location(location)
    settings = settings if settings is not None else S3Settings.resolve()
    now = now or datetime.now(timezone.utc)
    store = open_store(loc, settings)
    lease = None if dry_run else GCLease(store, loc, settings)
    try:
        if loc.path is not None and not loc.path.is_dir():
            # Before the lease, whose write would create the directory it names.
            Census(loc).check(store, allow_empty=allow_empty)
        if lease is not None:
            lease.acquire()
        job = _GC(loc, store, settings, now, dry_run, lease)
        job.allow_empty, job.meter = allow_empty, Meter(on_progress, dry_run=dry_run)
        job.window = max(float(chain_window), _MINUTE)
        try:
            report = job.run(older_than, max_bytes, uploads_older_than, delete_empty_manifests)
            return job.versions(report, delete=delete_noncurrent_versions)
        finally:
            job.meter.finish()  # a last event, Ctrl-C too: what an interrupt reports
    finally:
        release_and_close(lease, store)


@dataclass(frozen=True, slots=True)
class _Budget:
    """Where a ``max_bytes`` budget cuts: the minutes decided as chains, and the bytes
    to free among them."""

    first: int
    last: int
    quota: int


class _GC:
    def __init__(
        self,
        loc: Location,
        store: Store,
        settings: S3Settings,
        now: datetime,
        dry_run: bool,
        lease: GCLease | None = None,
    ) -> None:
        self.loc, self.store, self.settings, self.now = loc, store, settings, now
        self.dry_run = dry_run
        self.lease = lease
        # (key, the namespace folder of a block or "" for a temp file, size, ETag listed)
        self.pending: list[tuple[str, str, int, str | None]] = []
        self.failures: dict[str, str] = {}
        self.requests = 0
        self.deleted = self.freed = self.gone = 0
        self.undeleted: Counter[str] = Counter()
        """Blocks per namespace folder whose delete failed: they are still there."""
        self.collect_temps = False  # only in the deleting pass
        self.temps = 0
        self.census = Census(loc)
        self.allow_empty = False
        self.meter = Meter(None)
        self.window = float(DEFAULT_CHAIN_WINDOW)
        self.versioning = gc_versions.status(store, settings)

    def blocks(self) -> Iterator[tuple[Entry, float]]:
        """(entry, age in seconds) of every block; counts stray keys and manifests."""
        self.stray = 0
        self.manifests: dict[str, Entry] = {}
        self.census = Census(self.loc)  # each pass counts afresh
        for entry in walk(self.store, self.loc):
            self.census.add(entry)
            parsed = entry.parsed
            if entry.nested is not None:
                continue  # another location's cache: never touched from here
            if parsed is None and entry.temp:
                when = entry.info.last_modified or self.now
                if self.collect_temps and (self.now - when).total_seconds() > STALE_TEMP_SECONDS:
                    self.temps += 1
                    self._delete(entry, "")
            elif parsed is None:
                self.stray += 1
            elif parsed.kind == "manifest":
                self.manifests[parsed.folder] = entry
            else:
                when = entry.info.last_modified or self.now
                if self.meter.phase == "listing":  # deleting counts what _flush confirms
                    self.meter.add(1, entry.info.size)
                yield entry, (self.now - when).total_seconds()

    def run(
        self,
        older_than: float | None,
        max_bytes: int | None,
        uploads_older_than: float,
        delete_empty_manifests: bool,
    ) -> GCReport:
        started = time.perf_counter()
        budget = self._budget(older_than, max_bytes)
        if max_bytes is not None:  # the first pass listed everything: check before deleting
            self.census.check(self.store, allow_empty=self.allow_empty)
            # The bytes over budget (a floor with --older-than too); blocks are not known.
            self.meter.start("deleting", nbytes=max(self.census.bytes - max_bytes, 0))
        else:
            self.meter.start("deleting")
        kept = kept_bytes = 0
        left: Counter[str] = Counter()
        near: list[Near] = []
        self.collect_temps = True
        for entry, age in self.blocks():
            assert entry.parsed is not None
            by_age = by_budget = doomed = False
            if older_than is not None:
                doomed = age > older_than + self.window
                by_age = not doomed and age >= older_than - self.window
            if budget is not None and not doomed:
                minute = self._minute(entry)
                doomed = minute < budget.first
                by_budget = not doomed and minute <= budget.last
            if doomed:
                self._delete(entry, entry.parsed.folder)
            elif by_age or by_budget:
                near.append(Near(entry, by_age, by_budget))
            else:
                kept, kept_bytes = kept + 1, kept_bytes + entry.info.size
                left[entry.parsed.folder] += 1
        self._flush()
        window = Window(
            self.store,
            self.settings,
            self.now,
            older_than=older_than,
            quota=budget.quota if budget is not None else 0,
            dry_run=self.dry_run,
        )
        window.resolve(near, lambda e: self._delete(e, e.parsed.folder if e.parsed else ""),
                       self._flush)
        self.failures.update(window.failures)
        self.gone += window.gone
        for entry in window.kept:
            assert entry.parsed is not None
            kept, kept_bytes = kept + 1, kept_bytes + entry.info.size
            left[entry.parsed.folder] += 1
        self.census.check(self.store, allow_empty=self.allow_empty)
        self.meter.finish()
        manifests = EmptyManifests(self.store, self.settings, self.loc, dry_run=self.dry_run)
        if delete_empty_manifests:
            empty = [
                entry
                for folder, entry in sorted(self.manifests.items())
                if not left[folder] and not self.undeleted[folder]
            ]
            manifests.delete(empty)
            self.failures.update(manifests.failures)
            self.requests += manifests.requests
        return GCReport(
            location=self.loc.url,
            blocks_deleted=self.deleted,
            bytes_freed=self.freed,
            blocks_kept=kept,
            bytes_kept=kept_bytes,
            manifests_deleted=manifests.deleted,
            uploads_aborted=self._abort_uploads(uploads_older_than),
            failures=self.failures,
            dry_run=self.dry_run,
            seconds=time.perf_counter() - started,
            stray_keys=self.stray,
            delete_requests=self.requests,
            temp_files_deleted=self.temps,
            nested=self.census.nested_caches(),
            already_gone=self.gone,
            manifests_restored=manifests.restored,
            head_requests=window.head_requests,
            used_since_listed=window.used_since_listed,
        )

    def versions(self, report: GCReport, *, delete: bool) -> GCReport:
        """What a versioned bucket still stores, removed with ``delete`` (after the run:
        its deletes left versions too)."""
        found = gc_versions.collect(
            self.store, self.settings, self.loc, self.versioning, delete=delete,
            dry_run=self.dry_run,
        )
        failures = {**report.failures, **found.failures}
        freed = report.bytes_freed
        if found.versioned:  # a delete there only hides the bytes
            freed = found.deleted_bytes
        return replace(
            report,
            bytes_freed=freed,
            failures=failures,
            delete_requests=report.delete_requests + found.requests,
            versioning=found.versioning,
            noncurrent_versions=found.noncurrent - (0 if self.dry_run else found.deleted),
            noncurrent_bytes=found.noncurrent_bytes - (0 if self.dry_run else found.deleted_bytes),
            noncurrent_versions_deleted=found.deleted,
        )

    def _minute(self, entry: Entry) -> int:
        when = entry.info.last_modified or self.now
        return int(when.timestamp()) // _MINUTE

    def _budget(self, older_than: float | None, max_bytes: int | None) -> _Budget | None:
        """First pass for ``max_bytes``: the minutes near the cutoff, and what to free
        among them (None: nothing to free)."""
        if max_bytes is None:
            return None
        per_minute: Counter[int] = Counter()
        for entry, age in self.blocks():
            if older_than is None or age <= older_than:
                per_minute[self._minute(entry)] += entry.info.size
        excess = sum(per_minute.values()) - max_bytes
        if excess <= 0:
            return None
        cutoff = next(iter(sorted(per_minute)))
        reached = 0
        for minute in sorted(per_minute):
            cutoff = minute
            reached += per_minute[minute]
            if reached >= excess:
                break
        span = int(self.window) // _MINUTE
        first, last = cutoff - span, cutoff + span
        before = sum(b for m, b in per_minute.items() if m < first)
        return _Budget(first, last, excess - before)

    def _delete(self, entry: Entry, folder: str) -> None:
        self.pending.append((entry.info.key, folder, entry.info.size, entry.info.etag))
        if len(self.pending) >= DELETE_BATCH:
            self._flush()

    def _flush(self) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            return
        failed: dict[str, str] = {}
        gone: set[str] = set()
        if not self.dry_run:
            if self.lease is not None:
                self.lease.check()
            items = [(key, etag) for key, _, _, etag in batch]
            self.requests += 1
            try:
                failed, gone = with_retries(
                    lambda: self.store.delete_if_unchanged(items), self.settings
                )
            except S3KVError as exc:
                failed = {key: str(exc) for key, _ in items}
            self.failures.update(failed)
        for key, folder, size, _ in batch:
            if key in failed:
                if folder:
                    self.undeleted[folder] += 1
            elif key in gone:
                if folder:
                    self.gone += 1
            elif folder:
                self.deleted, self.freed = self.deleted + 1, self.freed + size
                self.meter.add(1, size, size)

    def _abort_uploads(self, older_than: float) -> int:
        limit = self.now - timedelta(seconds=older_than)
        aborted = 0
        root = list_root(self.loc)
        try:
            for upload in self.store.list_multipart_uploads(root):
                if upload.initiated is not None and upload.initiated < limit:
                    if not self.dry_run:
                        self._abort(upload)
                    aborted += 1
        except S3KVError as exc:  # blocks may be deleted already: report, don't hide it
            self.failures[f"{self.loc.url_for(root)} (multipart uploads)"] = str(exc)
        return aborted

    def _abort(self, upload: MultipartUpload) -> None:
        with_retries(lambda: self.store.abort_multipart_upload(upload), self.settings)
