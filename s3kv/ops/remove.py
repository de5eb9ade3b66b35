"""Removing namespaces: every rank's blocks, then the manifest (``s3kv rm``).

After a vLLM or model upgrade the old deployment's namespaces are never asked for again
(another model, dtype or vLLM release hashes to another folder); they stay until a
lifecycle rule or ``gc`` takes them. :func:`remove` takes them now, by folder or digest
(``namespaces``) or every namespace of a model (``models``):

1. The namespaces directly under the location are found by name, one listing request per
   folder (:mod:`s3kv.ops.folders`): the blocks of other namespaces are never listed, let
   alone touched. A filter that matches none is :class:`s3kv.NothingMatchedError` with
   the closest names.
2. Each namespace is listed (its folder and its rank folders; a key is the namespace's
   only when it parses to that folder) and counted: a dry run stops here.
3. Its blocks are deleted in batches of up to 1,000 keys, each with the ETag the listing
   gave (a block rewritten since is ``already_gone`` where the store checks it), and temp
   files of writes that died long ago (:data:`~s3kv.transfers.listing.STALE_TEMP_SECONDS`); keys
   outside the layout under its folders are left and counted ``stray_keys``.
4. The manifest goes last, under ``gc --delete-empty-manifests``' conditions
   (:mod:`s3kv.ops.gc.manifests`): only when every block delete was confirmed and a fresh
   listing finds no block, written back if a block appears just after.
5. The namespace is listed once more: blocks found then (``blocks_left``) were stored
   while rm ran. They and their manifest stay (a namespace is never left as blocks
   without their manifest by rm), and the report is not ``ok``: a writer still stores
   into the namespace; stop it (the old deployment) and run rm again.

One deleter at a time per location: rm holds gc's lease (:mod:`s3kv.ops.gc.lease`), so a gc
and an rm never both claim one free. In a directory, the namespace's folders left empty
are removed too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from s3kv.errors import InvalidInputError, NotAnS3KVKeyError, S3KVError
from s3kv.naming.location import Location, parse_location
from s3kv.naming.parse import parse_key
from s3kv.ops.folders import model_part, namespace_folders, pick
from s3kv.ops.gc.lease import GCLease, release_and_close
from s3kv.ops.gc.manifests import EmptyManifests
from s3kv.progress import Meter, ProgressCallback
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import ObjectInfo, Store, open_store
from s3kv.stores.base import DELETE_BATCH
from s3kv.stores.local import temp_target
from s3kv.transfers.listing import GC_LEASE_NAME, STALE_TEMP_SECONDS, Entry, root_of
from s3kv.transfers.stored_manifest import read_manifest


@dataclass(frozen=True, slots=True)
class NamespaceRemoval:
    """One namespace: what its listing held, and what stayed."""

    folder: str
    model: str
    """From the manifest; without one, the folder's model part (``/`` shown as ``_``)."""
    ranks: tuple[int, ...]
    blocks: int
    """Blocks listed (a dry run: what would be deleted)."""
    bytes: int
    manifest: Literal["present", "missing"]
    blocks_left: int = 0
    """Blocks found after the deletes: stored while rm ran (a writer still at work)."""
    manifest_left: bool = False
    """The manifest stayed (blocks left, a delete failed) or was written back."""
    stray_keys: int = 0


@dataclass(frozen=True, slots=True)
class RemoveReport:
    location: str
    namespaces: tuple[NamespaceRemoval, ...]
    dry_run: bool = False
    blocks_deleted: int = 0
    """Confirmed deletes (a dry run: blocks that would be deleted)."""
    bytes_freed: int = 0
    manifests_deleted: int = 0
    temp_files_deleted: int = 0
    already_gone: int = 0
    manifests_restored: int = 0
    delete_requests: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def blocks_left(self) -> int:
        return sum(n.blocks_left for n in self.namespaces)

    @property
    def stray_keys(self) -> int:
        return sum(n.stray_keys for n in self.namespaces)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.blocks_left


def remove(
    location: str | Location,
    *,
    namespaces: Sequence[str] = (),
    models: Sequence[str] = (),
    everything: bool = False,
    dry_run: bool = False,
    settings: S3Settings | None = None,
    on_progress: ProgressCallback | None = None,
) -> RemoveReport:
    """Remove the namespaces at ``location`` named by folder or digest (``namespaces``)
    or by model (``models``, ``org/name`` or its folder spelling ``org_name``), or, with
    ``everything``, every namespace there (a tenant forgotten: ``s3kv rm --tenant``):
    every rank's blocks, then the manifest. See the module for the order and the guards."""
    if not namespaces and not models and not everything:
        raise InvalidInputError(
            "rm needs --namespace FOLDER|DIGEST or --model NAME: it never removes a whole "
            "location (use 's3kv ls' to see what it holds)"
        )
    loc = location if isinstance(location, Location) else parse_location(location)
    settings = settings if settings is not None else S3Settings.resolve()
    started = time.perf_counter()
    store = open_store(loc, settings)
    lease = None if dry_run else GCLease(store, loc, settings)
    try:
        found = namespace_folders(store, loc)
        if everything and not namespaces and not models:
            folders = pick(loc, found, namespaces=sorted(found)) if found else pick(loc, found)
        else:
            folders = pick(loc, found, namespaces=namespaces, models=models)
        if lease is not None:
            lease.acquire()
        job = _Removal(store, loc, settings, dry_run, lease, Meter(on_progress, dry_run=dry_run))
        try:
            rows = job.run(folders)
        finally:
            job.meter.finish()
    finally:
        release_and_close(lease, store)
    return RemoveReport(
        location=loc.url,
        namespaces=rows,
        dry_run=dry_run,
        blocks_deleted=job.deleted,
        bytes_freed=job.freed,
        manifests_deleted=job.manifests.deleted,
        temp_files_deleted=job.temps,
        already_gone=job.gone,
        manifests_restored=job.manifests.restored,
        delete_requests=job.requests + job.manifests.requests,
        failures={**job.failures, **job.manifests.failures},
        seconds=time.perf_counter() - started,
    )


# -- removing -------------------------------------------------------------------------


@dataclass
class _Counted:
    """What one listing of a namespace held (counts only: a listing is streamed)."""

    blocks: int = 0
    bytes: int = 0
    manifest: Entry | None = None
    ranks: set[int] = field(default_factory=set)
    stray: int = 0
    stale_temps: int = 0


class _Removal:
    def __init__(
        self,
        store: Store,
        loc: Location,
        settings: S3Settings,
        dry_run: bool,
        lease: GCLease | None,
        meter: Meter,
    ) -> None:
        self.store, self.loc, self.settings, self.dry_run = store, loc, settings, dry_run
        self.lease, self.meter = lease, meter
        self.root = root_of(loc.prefix)
        self.deleted = self.freed = self.gone = self.temps = self.requests = 0
        self.failures: dict[str, str] = {}
        self.manifests = EmptyManifests(store, settings, loc, dry_run=dry_run)

    def run(self, folders: dict[str, set[int]]) -> tuple[NamespaceRemoval, ...]:
        counted = {folder: self._count(folder) for folder in folders}
        self.meter.start(
            "deleting",
            blocks=sum(c.blocks for c in counted.values()),
            nbytes=sum(c.bytes for c in counted.values()),
        )
        return tuple(self._remove(folder, counted[folder], folders[folder]) for folder in folders)

    def _remove(self, folder: str, counted: _Counted, ranks: set[int]) -> NamespaceRemoval:
        left, manifest_left = 0, counted.manifest is not None
        model = self._model(folder, counted.manifest)  # while the manifest is there
        if self.dry_run:
            self.deleted, self.freed = self.deleted + counted.blocks, self.freed + counted.bytes
            self.meter.add(counted.blocks, counted.bytes)
            self.temps += counted.stale_temps
            if counted.manifest is not None:
                self.manifests.delete([counted.manifest])
        else:
            failed_before = len(self.failures)
            pending: list[Entry] = []
            for entry, stale in self._entries(folder):
                if stale or (entry.parsed is not None and entry.parsed.kind == "block"):
                    pending.append(entry)
                if len(pending) >= DELETE_BATCH:
                    self._send(pending)
                    pending = []
            self._send(pending)
            left = self._count(folder).blocks
            if counted.manifest is not None and len(self.failures) == failed_before and not left:
                deleted = self.manifests.deleted
                self.manifests.delete([counted.manifest])
                manifest_left = self.manifests.deleted == deleted
            if self.loc.path is not None:
                self._prune(folder, ranks | counted.ranks)
        return NamespaceRemoval(
            folder=folder,
            model=model,
            ranks=tuple(sorted(counted.ranks)),
            blocks=counted.blocks,
            bytes=counted.bytes,
            manifest="present" if counted.manifest is not None else "missing",
            blocks_left=left,
            manifest_left=manifest_left and not self.dry_run,
            stray_keys=counted.stray,
        )

    def _count(self, folder: str) -> _Counted:
        counted = _Counted()
        for entry, stale in self._entries(folder, with_stray=True):
            if entry.parsed is None:
                counted.stray += not entry.temp
                counted.stale_temps += stale
            elif entry.parsed.kind == "manifest":
                counted.manifest = entry
            else:
                assert entry.parsed.rank is not None
                counted.ranks.add(entry.parsed.rank)
                counted.blocks += 1
                counted.bytes += entry.info.size
        return counted

    def _entries(self, folder: str, *, with_stray: bool = False) -> Iterator[tuple[Entry, bool]]:
        """(entry, a stale temp file) for every key of the namespace, in its folder and
        its rank folders, streamed; strays only ``with_stray``."""
        now = time.time()
        for prefix in (f"{self.root}{folder}/", f"{self.root}{folder}_r"):
            for info in self.store.list(prefix):
                entry = self._entry(info, folder)
                if entry is None or (entry.parsed is None and not entry.temp and not with_stray):
                    continue
                when = entry.info.last_modified
                stale = entry.temp and (
                    when is None or now - when.timestamp() > STALE_TEMP_SECONDS
                )  # a younger temp file is a write in progress: left to finish
                yield entry, stale

    def _entry(self, info: ObjectInfo, folder: str) -> Entry | None:
        """The key as the namespace's (parsed, a temp file, or stray); None if it belongs
        to another namespace whose folder starts alike."""
        if info.key.rpartition("/")[2] == GC_LEASE_NAME:
            return None
        try:
            parsed = parse_key(info.key)
        except NotAnS3KVKeyError as exc:
            if self._temp_of(info.key) == folder:
                return Entry(info, None, temp=True)
            return Entry(info, None, str(exc)) if self._under(info.key, folder) else None
        if parsed.folder != folder or parsed.prefix != self.loc.prefix:
            return None
        return Entry(info, parsed)

    @staticmethod
    def _temp_of(key: str) -> str | None:
        """The namespace folder of a temp file's block; None if ``key`` is none."""
        target = temp_target(key)
        if target is None:
            return None
        try:
            return parse_key(target).folder
        except NotAnS3KVKeyError:
            return None

    def _under(self, key: str, folder: str) -> bool:
        """Whether a key outside the layout lies in this namespace's own folders."""
        rest = key[len(self.root) :]
        if rest.startswith(f"{folder}/"):
            return True
        head = rest.partition("/")[0]
        rank = head.removeprefix(f"{folder}_r")
        return head != rank and rank.isdigit()

    def _send(self, batch: Sequence[Entry]) -> None:
        """Delete one batch (blocks and stale temp files), each under its listed ETag."""
        if not batch:
            return
        if self.lease is not None:
            self.lease.check()  # still ours (one HEAD), written again when due
        items = [(e.info.key, e.info.etag) for e in batch]
        self.requests += 1
        try:
            failed, gone = with_retries(
                lambda: self.store.delete_if_unchanged(items), self.settings
            )
        except S3KVError as exc:
            failed, gone = {key: str(exc) for key, _ in items}, set()
        self.failures.update(failed)
        for entry in batch:
            key, size = entry.info.key, entry.info.size
            if key in failed:
                continue
            if entry.parsed is None:
                self.temps += key not in gone
            elif key in gone:
                self.gone += 1
            else:
                self.deleted, self.freed = self.deleted + 1, self.freed + size
                self.meter.add(1, size, size)

    def _model(self, folder: str, manifest: Entry | None) -> str:
        if manifest is not None:
            try:
                read = read_manifest(self.store, self.loc.prefix, folder, self.settings)
            except S3KVError:
                read = None
            if read is not None and read.namespace is not None and not read.problem:
                return read.namespace.model_name
        return model_part(folder)

    def _prune(self, folder: str, ranks: Iterable[int]) -> None:
        """Remove the namespace's folders left empty (a directory has folders of its own;
        S3 has none). Never follows a symlink; a folder still holding anything stays."""
        assert self.loc.path is not None
        for name in (folder, *(f"{folder}_r{rank}" for rank in sorted(set(ranks)))):
            top = self.loc.path / name
            if top.is_symlink() or not top.is_dir():
                continue
            for path, _, _ in os.walk(top, topdown=False):
                try:
                    os.rmdir(path)
                except OSError:
                    pass
