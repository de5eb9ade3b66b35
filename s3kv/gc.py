"""Collecting garbage: blocks by age, or oldest first until under a byte budget.

Only parsed block keys are ever deleted (stray keys are left alone), in batches of up to
1,000 keys per request, as the listing streams by: memory stays flat.

``max_bytes`` needs the ages of all blocks before the first delete, so it lists twice:
the first pass builds a histogram of bytes per minute of ``LastModified`` (small
whatever the block count), which gives the cutoff minute; the second deletes blocks older
than the cutoff, and as many of the cutoff minute's as the budget needs. Oldest first is
thus exact to the minute.

Manifests: never deleted by default. vLLM and s3kv write a namespace's manifest once,
before its first block, and never again; deleting it while a writer still runs would
leave that writer's new blocks orphaned. With ``delete_empty_manifests`` a manifest goes
only when its namespace has no block left at all, in any rank, after this run: every
block delete of the namespace must have been confirmed, so a failed delete keeps the
manifest (else the surviving block would be an orphan that ``pull`` skips).
``blocks_deleted`` and ``bytes_freed`` count confirmed deletes only; failures are listed.
Incomplete multipart uploads older than ``uploads_older_than`` seconds are aborted.

Temp files of writes that died between write and rename (``<block>.bin_<token>.tmp``,
older than :data:`~s3kv.listing.STALE_TEMP_SECONDS`) are never data: every run removes
them, whatever the age or budget asked for. Younger ones are writes in progress.

The location means what it means for every command (:mod:`s3kv.scope`): caches nested
below it are not touched, and a location that holds no namespace is an error naming what
was probably meant (``allow_empty`` accepts one with nothing at all under it); with
``max_bytes`` the check runs on the first pass, before anything is deleted.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from s3kv.errors import InvalidInputError, S3KVError
from s3kv.listing import STALE_TEMP_SECONDS, Entry, list_root, walk
from s3kv.location import Location, parse_location
from s3kv.progress import Meter, ProgressCallback
from s3kv.retry import with_retries
from s3kv.scope import Census, NestedCache
from s3kv.settings import S3Settings
from s3kv.stores import MultipartUpload, Store, open_store
from s3kv.stores.base import DELETE_BATCH

DEFAULT_UPLOADS_OLDER_THAN = 24 * 3600.0
MAX_AGE_SECONDS = 1000 * 365 * 86400.0
"""The longest age gc takes (1,000 years): older cutoffs fall before any timestamp."""
_MINUTE = 60


@dataclass(frozen=True, slots=True)
class GCReport:
    location: str
    blocks_deleted: int
    bytes_freed: int
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
    try:
        job = _GC(loc, store, settings, now, dry_run)
        job.allow_empty, job.meter = allow_empty, Meter(on_progress, dry_run=dry_run)
        try:
            return job.run(older_than, max_bytes, uploads_older_than, delete_empty_manifests)
        finally:
            job.meter.finish()  # a last event, Ctrl-C too: what an interrupt reports
    finally:
        store.close()


class _GC:
    def __init__(
        self, loc: Location, store: Store, settings: S3Settings, now: datetime, dry_run: bool
    ) -> None:
        self.loc, self.store, self.settings, self.now, self.dry_run = (
            loc,
            store,
            settings,
            now,
            dry_run,
        )
        # (key, the namespace folder of a block or "" for a manifest, size)
        self.pending: list[tuple[str, str, int]] = []
        self.failures: dict[str, str] = {}
        self.requests = 0
        self.deleted = self.freed = 0
        self.undeleted: Counter[str] = Counter()
        """Blocks per namespace folder whose delete failed: they are still there."""
        self.collect_temps = False  # only in the deleting pass
        self.temps = 0
        self.census = Census(loc)
        self.allow_empty = False
        self.meter = Meter(None)

    def blocks(self) -> Iterator[tuple[Entry, float]]:
        """(entry, age in seconds) of every block; counts stray keys and manifests."""
        self.stray = 0
        self.manifests: dict[str, str] = {}
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
                    self._delete(entry.info.key, "", entry.info.size)
            elif parsed is None:
                self.stray += 1
            elif parsed.kind == "manifest":
                self.manifests[parsed.folder] = entry.info.key
            else:
                when = entry.info.last_modified or self.now
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
        cutoff_minute, cutoff_quota = self._budget(older_than, max_bytes)
        if max_bytes is not None:  # the first pass listed everything: check before deleting
            self.census.check(self.store, allow_empty=self.allow_empty)
            self.meter.start("deleting", blocks=self.census.blocks, nbytes=self.census.bytes)
        else:
            self.meter.start("deleting")
        kept = kept_bytes = 0
        left: Counter[str] = Counter()
        self.collect_temps = True
        for entry, age in self.blocks():
            assert entry.parsed is not None
            minute = self._minute(entry)
            size = entry.info.size
            doomed = older_than is not None and age > older_than
            if not doomed and cutoff_minute is not None:
                doomed = minute < cutoff_minute
                if minute == cutoff_minute and cutoff_quota > 0:
                    doomed, cutoff_quota = True, cutoff_quota - size
            if doomed:
                self._delete(entry.info.key, entry.parsed.folder, size)
            else:
                kept, kept_bytes = kept + 1, kept_bytes + size
                left[entry.parsed.folder] += 1
        self._flush()
        self.census.check(self.store, allow_empty=self.allow_empty)
        self.meter.finish()
        manifests_deleted = 0
        if delete_empty_manifests:
            empty = [
                key
                for folder, key in sorted(self.manifests.items())
                if not left[folder] and not self.undeleted[folder]
            ]
            for key in empty:
                self._delete(key, "", 0)
            self._flush()
            manifests_deleted = len([k for k in empty if k not in self.failures])
        return GCReport(
            location=self.loc.url,
            blocks_deleted=self.deleted,
            bytes_freed=self.freed,
            blocks_kept=kept,
            bytes_kept=kept_bytes,
            manifests_deleted=manifests_deleted,
            uploads_aborted=self._abort_uploads(uploads_older_than),
            failures=self.failures,
            dry_run=self.dry_run,
            seconds=time.perf_counter() - started,
            stray_keys=self.stray,
            delete_requests=self.requests,
            temp_files_deleted=self.temps,
            nested=self.census.nested_caches(),
        )

    def _minute(self, entry: Entry) -> int:
        when = entry.info.last_modified or self.now
        return int(when.timestamp()) // _MINUTE

    def _budget(self, older_than: float | None, max_bytes: int | None) -> tuple[int | None, int]:
        """First pass for ``max_bytes``: the cutoff minute and the bytes to free within it."""
        if max_bytes is None:
            return None, 0
        per_minute: Counter[int] = Counter()
        for entry, age in self.blocks():
            if older_than is None or age <= older_than:
                per_minute[self._minute(entry)] += entry.info.size
        excess = sum(per_minute.values()) - max_bytes
        for minute in sorted(per_minute):
            if excess <= 0:
                return minute, 0
            if per_minute[minute] >= excess:
                return minute, excess
            excess -= per_minute[minute]
        return None, 0

    def _delete(self, key: str, folder: str, size: int) -> None:
        self.pending.append((key, folder, size))
        if len(self.pending) >= DELETE_BATCH:
            self._flush()

    def _flush(self) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            return
        failed: dict[str, str] = {}
        if not self.dry_run:
            keys = [key for key, _, _ in batch]
            self.requests += 1
            try:
                failed = with_retries(lambda: self.store.delete_many(keys), self.settings)
            except S3KVError as exc:
                failed = {key: str(exc) for key in keys}
            self.failures.update(failed)
        for key, folder, size in batch:
            if key in failed:
                if folder:
                    self.undeleted[folder] += 1
            elif folder:
                self.deleted, self.freed = self.deleted + 1, self.freed + size
                self.meter.add(0, 0, size)

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
