"""Copying caches between locations: the engine behind ``push``, ``pull`` and ``cp``.

One streaming walk of the source listing; every key parsed (strays are counted, never
copied); destination keys rebuilt from the parsed key (never from the raw source key),
so no bucket content can name a path outside the destination. Per namespace the
manifest is created first, then its blocks: create-only, concurrent on a bounded pool
with a bounded number of blocks in flight (memory stays flat for any count),
checksummed, and resumable: the destination is listed once alongside the source
(:class:`s3kv.transfers.listing.SortedPresence`), so a re-run sends only what is missing.
Both sides on one S3 endpoint: server-side copy; otherwise bytes stream through.

Every block is held to its namespace and rank's usual size (the most common one, from
one listing of that rank's folder): a larger object is failed without being read (a
foreign object under a block key must not fill memory), and a block is read no larger
than listed. A block whose source records no checksum (vLLM's object-store tier, another
client, any directory) must have exactly that size; one read from S3 is counted
``unverified`` (a directory records no checksum by design: its blocks are not). A
checksum mismatch is read once more (it may have been damaged on the wire); a second
one is damage. A destination block of the right size counts as already present, unless
both sides record checksums and they differ; with ``checksum`` it is read and compared
too. A destination block that fails its check (of another size, or, with ``checksum``,
differing from a verified source) is replaced from a source block that passes its own
(:mod:`s3kv.ops.damage`: ``If-Match`` on S3, re-check and rename in a directory). A
namespace whose manifest cannot be written (a folder that cannot be made) is reported
failed with the reason, and the sync goes on with the others.

The source is listed once before anything is written: to count (the totals progress
shows, and the check that the location and the filters match something:
:class:`s3kv.ops.scope.Census`) and to learn each rank folder's usual block size. Its
entries are kept for the copy up to :data:`REPLAY_ENTRIES` (about 1 KiB each); a longer
listing is walked again to copy, so memory stays bounded for any count.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Literal

import s3kv.integrity as integrity
from s3kv.errors import (
    ChecksumMismatchError,
    NothingMatchedError,
    ObjectNotFoundError,
    S3KVError,
    SizeMismatchError,
)
from s3kv.naming.location import Location, parse_location
from s3kv.naming.parse import ParsedKey, parse_key
from s3kv.ops import damage
from s3kv.ops.scope import Census
from s3kv.ops.sync_files import PullAttempt, PushAttempt
from s3kv.ops.sync_manifest import ManifestCopy
from s3kv.ops.sync_report import (
    MAX_FAILURES_KEPT,
    ManifestStatus,
    NamespaceSync,
    SyncOptions,
    SyncProgress,
    SyncReport,
)
from s3kv.progress import Meter, ProgressCallback
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import PutOptions, Store, open_store
from s3kv.transfers.jobs import TransferJob
from s3kv.transfers.listing import MAX_EXAMPLES, Entry, SortedPresence, root_of, usual_size, walk
from s3kv.transfers.transfer import BLOCK_TAGS
from s3kv.transfers.writes import put_create_only, write_id

__all__ = [
    "MAX_FAILURES_KEPT", "ManifestStatus", "NamespaceSync", "SyncOptions", "SyncProgress",
    "SyncReport", "sync",
]

_Outcome = Literal["copied", "already_present", "replaced"]

REPLAY_ENTRIES = 10_000
"""Listed entries kept from the count for the copy (about 10 MiB); a longer listing is
listed again, a small share of copying that many blocks."""


def rank_folder(key: str) -> str:
    """The rank folder a block key sits in: ``prefix/<folder>_r<rank>/``."""
    return key.rsplit("/", 3)[0] + "/"

def sync(
    source: str | os.PathLike[str] | Location,
    destination: str | os.PathLike[str] | Location,
    *,
    settings: S3Settings | None = None,
    source_settings: S3Settings | None = None,
    options: SyncOptions | None = None,
    on_progress: ProgressCallback | None = None,
) -> SyncReport:
    """Copy every namespace (manifest, then blocks) from ``source`` to ``destination``."""
    src_loc = source if isinstance(source, Location) else parse_location(source)
    dst_loc = destination if isinstance(destination, Location) else parse_location(destination)
    dst_settings = settings if settings is not None else S3Settings.resolve()
    src_settings = source_settings if source_settings is not None else dst_settings
    src = open_store(src_loc, src_settings)
    dst = open_store(dst_loc, dst_settings)
    try:
        job = _Sync(
            src_loc,
            dst_loc,
            src,
            dst,
            src_settings,
            dst_settings,
            options or SyncOptions(),
            on_progress,
        )
        try:
            return job.run()
        finally:
            job.meter.finish()  # a last event, Ctrl-C too: what an interrupt reports
    finally:
        src.close()
        dst.close()


class _Sync:
    def __init__(
        self,
        src_loc: Location,
        dst_loc: Location,
        src: Store,
        dst: Store,
        src_settings: S3Settings,
        dst_settings: S3Settings,
        options: SyncOptions,
        on_progress: ProgressCallback | None,
    ) -> None:
        self.src_loc, self.dst_loc, self.src, self.dst = src_loc, dst_loc, src, dst
        self.src_settings, self.settings, self.options = src_settings, dst_settings, options
        self.meter = Meter(on_progress, dry_run=options.dry_run)
        self.server_side = dst.copies_from(src)
        # Only S3 objects record checksums; a directory records none.
        self.compare_checksums = src.records_checksums and dst.records_checksums
        self.src_records_checksums = src.records_checksums
        self.census = Census(src_loc, namespaces=options.namespaces, ranks=options.ranks)
        self.sizes: dict[str, int | None] = {}  # rank folder key prefix -> its usual size
        self.sizes_lock = threading.Lock()
        self.dst_root = root_of(dst_loc.prefix)
        self.presence = SortedPresence(dst, self.dst_root)
        self.namespaces: dict[str, NamespaceSync] = {}
        self.failures: dict[str, str] = {}
        self.lock = threading.Lock()
        self.stray = 0
        self.stray_examples: list[str] = []
        self.unread = 0  # entries of a source directory that are not files or folders
        self.started = time.perf_counter()
        self.manifests = ManifestCopy(src, src_loc, src_settings, dst, dst_loc, dst_settings,
                                      options)
        concurrency = options.concurrency or dst_settings.concurrency
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="s3kv-sync")
        # Blocks in flight (each holding its bytes) never exceed twice the pool size.
        self.slots = threading.BoundedSemaphore(concurrency * 2)
        # A pull or a push (a directory at one end): each block a job whose completion
        # counts it; its file moved by the S3 client itself (s3kv.ops.sync_files).
        self.files = dst.is_local != src.is_local
        self.pending: set[object] = set()  # blocks whose jobs have not ended
        self.jobs: dict[object, TransferJob] = {}  # those started (to cancel them)
        self.jobs_idle = threading.Condition(threading.Lock())

    def run(self) -> SyncReport:
        # Count, and refuse a location or filter that matches nothing before anything is
        # written; learn every rank folder's usual block size on the way.
        kept: list[Entry] | None = []
        sizes: dict[str, Counter[int]] = {}
        for entry in walk(self.src, self.src_loc):
            if entry.parsed is not None and entry.parsed.kind == "block":
                sizes.setdefault(rank_folder(entry.info.key), Counter())[entry.info.size] += 1
            if self.census.add(entry) and entry.parsed and entry.parsed.kind == "block":
                self.meter.add(1, entry.info.size)
            if kept is not None:
                if len(kept) < REPLAY_ENTRIES:
                    kept.append(entry)
                else:
                    kept = None  # too many to keep: listed again to copy
        self.sizes.update((folder, usual_size(counts)) for folder, counts in sizes.items())
        not_files = self.census.not_files(self.src)
        try:
            self.census.check(self.src, allow_empty=self.options.allow_empty)
        except NothingMatchedError as exc:
            if not_files:
                raise NothingMatchedError(f"{exc}; {next(iter(not_files.values()))}") from None
            raise
        for key, why in not_files.items():  # never read: each one failed, none left unsaid
            self.unread += 1
            self._note(key, why)
        self.meter.start("copying", blocks=self.census.blocks, nbytes=self.census.bytes)
        try:
            for entry in kept if kept is not None else walk(self.src, self.src_loc):
                if entry.parsed is None:
                    if entry.temp or entry.nested:  # a write in progress; another cache
                        continue
                    self.stray += 1
                    if len(self.stray_examples) < MAX_EXAMPLES:
                        self.stray_examples.append(entry.info.key)
                    continue
                if self.census.wants(entry.parsed):
                    self._visit(entry, entry.parsed)
            self._settle_jobs(cancel=False)
            self.pool.shutdown(wait=True)
        finally:
            self._settle_jobs(cancel=True)
            self.pool.shutdown(wait=True, cancel_futures=True)
        self.meter.finish()
        return self._report()

    def _visit(self, entry: Entry, parsed: ParsedKey) -> None:
        state = self.namespaces.get(parsed.folder) or self._prepare(parsed)
        if parsed.kind != "block":
            return
        size = entry.info.size
        relative = parsed.relative_path
        if state.manifest == "failed":
            self._fail(
                parsed.folder,
                self.dst_root + relative,
                f"not copied: the namespace's manifest could not be written ({state.problem})",
                size=size,
            )
            return
        if state.manifest in ("invalid", "conflict") or (
            state.manifest == "missing" and not self.options.allow_missing_manifest
        ):
            self._count(parsed.folder, size=size, skipped=1)
            return
        usual = self._usual_size(entry.info.key)
        if usual is not None and size > usual:
            self._fail(
                parsed.folder,
                self.dst_root + relative,
                f"{self.src_loc.url_for(entry.info.key)}: {size} bytes, larger than the "
                f"{usual} bytes of its namespace's other rank-{parsed.rank} blocks: a foreign "
                "or damaged object; not read. Run 's3kv verify' on the source",
                size=size,
            )
            return
        present_size = self.presence.size_of(relative)
        dst_key = self.dst_root + relative
        if present_size is not None:
            if present_size != size or self.options.checksum:
                # Another size (or, asked, another checksum): replace it if it fails its check
                self._submit(parsed.folder, dst_key, size, self._mend, entry.info.key, dst_key)
            elif self.compare_checksums:
                self._submit(parsed.folder, dst_key, size, self._confirmed, entry.info.key, dst_key)
            else:
                self._count(parsed.folder, size=size, already_present=1)
            return
        if self.options.dry_run:
            self._count(parsed.folder, size=size, copied=1, bytes=size)
            return
        if self.files:
            self._move(parsed.folder, entry.info.key, dst_key, size)
            return
        self._submit(parsed.folder, dst_key, size, self._copied, entry.info.key, dst_key, size)

    def _submit(
        self,
        folder: str,
        dst_key: str,
        size: int,
        task: Callable[..., tuple[_Outcome, int, bool]],
        *args: object,
    ) -> None:
        self.slots.acquire()
        future = self.pool.submit(task, *args)
        future.add_done_callback(self._collector(folder, dst_key, size))

    def _move(self, folder: str, src_key: str, dst_key: str, size: int) -> None:
        """One block between S3 and the directory: a job of its own (its retries, its
        deadline), whose completion counts it; no thread waits for it."""
        ticket = object()  # the block's slot, until it is counted or never started
        self.slots.acquire()
        with self.jobs_idle:
            self.pending.add(ticket)
        try:
            where = self.src_loc.url_for(src_key)

            def usual() -> int | None:
                return self._usual_size(src_key)

            attempt: PullAttempt | PushAttempt
            operation: Literal["upload", "download"]
            if self.dst.is_local:
                attempt = PullAttempt(self.src, src_key, where, self.dst, dst_key, size,
                                      usual, self.pool)
                operation, settings = "download", self.src_settings
            else:
                attempt = PushAttempt(self.src, src_key, where, self.dst, dst_key, size,
                                      usual, self.settings, self.pool)
                operation, settings = "upload", self.settings
            job = TransferJob(operation, [attempt], window=1, settings=settings,
                              on_done=lambda job: self._moved(ticket, folder, dst_key, size, job))
        except BaseException:
            self._let_go(ticket)  # never started (Ctrl-C): nothing else counts it
            raise
        with self.jobs_idle:
            if ticket in self.pending:
                self.jobs[ticket] = job

    def _moved(self, ticket: object, folder: str, dst_key: str, size: int,
               job: TransferJob) -> None:
        try:
            report = job.result()
            if job.cancelled:  # interrupted: not done, not failed
                return
            if report.failed:
                self._fail(folder, dst_key, next(iter(report.failed.values())), size=size)
            elif report.done:
                unverified = int(bool(report.unverified) and self.src_records_checksums)
                self._count(folder, size=size, copied=1, bytes=report.bytes,
                            unverified=unverified)
            else:
                self._count(folder, size=size, already_present=1)
        finally:
            self._let_go(ticket)

    def _let_go(self, ticket: object) -> None:
        """A block's slot back, once."""
        with self.jobs_idle:
            if ticket not in self.pending:
                return
            self.pending.discard(ticket)
            self.jobs.pop(ticket, None)
            self.jobs_idle.notify_all()
        self.slots.release()

    def _settle_jobs(self, *, cancel: bool) -> None:
        """Wait until every block's job ended (cancelled first, if ``cancel``): a pull's
        temp files are gone by then, a push's files let go."""
        with self.jobs_idle:
            jobs = list(self.jobs.values()) if cancel else []
        for job in jobs:
            job.cancel()
        with self.jobs_idle:
            while self.pending:
                self.jobs_idle.wait()

    # -- manifests --------------------------------------------------------------------

    def _prepare(self, parsed: ParsedKey) -> NamespaceSync:
        """Copy the namespace's manifest before any of its blocks; decide if blocks go."""
        status, problem = self.manifests.copy(parsed.folder)
        state = NamespaceSync(parsed.folder, status, problem=problem)
        self.namespaces[parsed.folder] = state
        return state

    # -- blocks -----------------------------------------------------------------------

    def _copy(self, src_key: str, dst_key: str, size: int) -> tuple[bool, int, bool]:
        """Copy one block; (created, bytes, unverified)."""
        where = self.src_loc.url_for(src_key)
        if self.server_side:
            # The bytes never pass here: the source's metadata says whether they can be
            # trusted, and a block without a checksum gets its size checked first.
            info = with_retries(lambda: self.src.head(src_key), self.src_settings)
            if info is None:
                raise ObjectNotFoundError(f"HEAD {where}: no such object")
            if info.checksum is None:
                integrity.check_size(info.size, self._usual_size(src_key), where=where)
            created = with_retries(
                lambda: self.dst.copy_from(self.src, src_key, dst_key), self.settings
            )
            return created, size if created else 0, created and info.checksum is None
        def read() -> tuple[bytes, integrity.Checksum | None]:
            # Never more than listed: an object replaced since is refused unread.
            data, info = with_retries(
                lambda: self.src.get(src_key, max_bytes=size), self.src_settings
            )
            if len(data) != size:
                raise SizeMismatchError(f"{where}: listed as {size} bytes, read {len(data)}")
            return data, info.checksum

        first, recorded = read()
        checksum = recorded
        data: integrity.Buffer = first
        if recorded is not None:
            data = integrity.verified(recorded, first, lambda: read()[0], where=where)
        else:
            integrity.check_size(len(data), self._usual_size(src_key), where=where)
            checksum = integrity.compute(self.settings.checksum, data)
        options = PutOptions(
            create_only=True, checksum=checksum, tags=BLOCK_TAGS, write_id=write_id()
        )
        created = put_create_only(self.dst, dst_key, data, options, self.settings)
        return created, len(data) if created else 0, created and recorded is None

    def _copied(self, src_key: str, dst_key: str, size: int) -> tuple[_Outcome, int, bool]:
        created, nbytes, unverified = self._copy(src_key, dst_key, size)
        unverified = unverified and self.src_records_checksums
        return ("copied" if created else "already_present"), nbytes, unverified

    def _confirmed(self, src_key: str, dst_key: str) -> tuple[_Outcome, int, bool]:
        self._confirm(src_key, dst_key)
        return "already_present", 0, False

    def _mend(self, src_key: str, dst_key: str) -> tuple[_Outcome, int, bool]:
        """A destination block of another size, or any with ``checksum``: see
        :func:`s3kv.ops.damage.mend`."""
        outcome, nbytes, unverified = damage.mend(
            self.src,
            self.src_loc.url_for(src_key),
            src_key,
            self.dst,
            self.dst_loc.url_for(dst_key),
            dst_key,
            usual=self._usual_size(src_key),
            src_settings=self.src_settings,
            dst_settings=self.settings,
            dry_run=self.options.dry_run,
        )
        return outcome, nbytes, unverified and self.src_records_checksums

    def _confirm(self, src_key: str, dst_key: str) -> tuple[bool, int, bool]:
        """A destination block of the right size: already present, unless both sides
        record checksums and they differ (raises :class:`ChecksumMismatchError`)."""
        theirs = with_retries(lambda: self.dst.head(dst_key), self.settings)
        ours = with_retries(lambda: self.src.head(src_key), self.src_settings)
        a = theirs.checksum if theirs is not None else None
        b = ours.checksum if ours is not None else None
        if a is not None and b is not None and a.algorithm == b.algorithm and a != b:
            raise ChecksumMismatchError(
                f"{self.dst_loc.url_for(dst_key)} exists with the source's size but another "
                f"{a.algorithm} checksum ({a.value}, the source's is {b.value}); left alone. "
                "Run 's3kv verify --deep' on the destination"
            )
        return False, 0, False

    def _usual_size(self, src_key: str) -> int | None:
        """The usual block size of the source folder holding ``src_key`` (its namespace
        and rank): from the count's listing, else one listing of that folder."""
        folder = rank_folder(src_key)
        with self.sizes_lock:
            if folder not in self.sizes:
                sizes: Counter[int] = Counter()
                for info in self.src.list(folder):
                    try:
                        if parse_key(info.key).kind == "block":
                            sizes[info.size] += 1
                    except S3KVError:
                        continue
                self.sizes[folder] = usual_size(sizes)
            return self.sizes[folder]

    def _collector(
        self, folder: str, dst_key: str, size: int
    ) -> Callable[[Future[tuple[_Outcome, int, bool]]], None]:
        def done(future: Future[tuple[_Outcome, int, bool]]) -> None:
            self.slots.release()
            if future.cancelled():  # interrupted before it started: not done, not failed
                return
            try:
                outcome, nbytes, unverified = future.result()
            except S3KVError as exc:
                self._fail(folder, dst_key, str(exc), size=size)
            except Exception as exc:  # a bug must not lose the block: report it
                self._fail(folder, dst_key, f"unexpected {type(exc).__name__}: {exc}", size=size)
            else:
                if outcome == "already_present":
                    self._count(folder, size=size, already_present=1)
                else:
                    counts = {outcome: 1, "bytes": nbytes, "unverified": int(unverified)}
                    self._count(folder, size=size, **counts)

        return done

    # -- bookkeeping ------------------------------------------------------------------

    def _fail(self, folder: str, key: str, reason: str, *, size: int = 0) -> None:
        self._note(key, reason)
        self._count(folder, size=size, failed=1)

    def _note(self, key: str, reason: str) -> None:
        """Keep why ``key`` failed (the first :data:`MAX_FAILURES_KEPT`)."""
        with self.lock:
            if len(self.failures) < MAX_FAILURES_KEPT:
                self.failures[key] = reason

    def _count(self, folder: str, *, size: int, **deltas: int) -> None:
        with self.lock:
            state = self.namespaces[folder]
            self.namespaces[folder] = replace(
                state, **{k: getattr(state, k) + v for k, v in deltas.items()}
            )
        self.meter.add(1, size, deltas.get("bytes", 0))

    def _report(self) -> SyncReport:
        states = tuple(self.namespaces[k] for k in sorted(self.namespaces))
        return SyncReport(
            source=self.src_loc.url,
            destination=self.dst_loc.url,
            namespaces=states,
            copied=sum(s.copied for s in states),
            already_present=sum(s.already_present for s in states),
            failed=sum(s.failed for s in states) + self.unread,
            skipped=sum(s.skipped for s in states),
            bytes=sum(s.bytes for s in states),
            seconds=time.perf_counter() - self.started,
            stray_keys=self.stray,
            stray_examples=tuple(self.stray_examples),
            failures=dict(self.failures),
            server_side=self.server_side,
            dry_run=self.options.dry_run,
            destination_listings=self.presence.listings,
            unverified=sum(s.unverified for s in states),
            replaced=sum(s.replaced for s in states),
            nested=self.census.nested_caches(),
        )
