"""``gc --delete-empty-manifests``: drop a namespace's manifest only when no writer needs it.

The run's listing said the namespace has no block left, but a writer may start at any
moment: it checks the manifest once, then stores blocks. So each manifest goes under
the conditions S3 offers, and is put back when a writer raced the delete:

1. its bytes are read (to restore them), and a fresh listing of the namespace, every
   rank, must find no block;
2. the delete carries the ETag the run listed (AWS then refuses to delete a manifest
   rewritten meanwhile; Ceph RGW 16 and moto ignore the condition);
3. a listing just after the delete must still find no block; if one appeared, the
   manifest is written back at once, create-only (a writer that re-wrote it first wins,
   with the same bytes), and counted ``restored``, not deleted.

A writer that starts after step 3 finds no manifest and writes it (the Uploader
re-checks its manifest; s3kv's tier and ``push`` both go through it).
"""

from __future__ import annotations

from collections.abc import Sequence

from s3kv.errors import NotAnS3KVKeyError, ObjectNotFoundError, S3KVError
from s3kv.naming.location import Location
from s3kv.naming.parse import parse_key
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import PutOptions, Store
from s3kv.transfers.listing import Entry, root_of
from s3kv.transfers.stored_manifest import read_capped

RESTORE = PutOptions(create_only=True)


class EmptyManifests:
    """Deletes manifests of namespaces left empty; counts what it did (see the module)."""

    def __init__(
        self, store: Store, settings: S3Settings, location: Location, *, dry_run: bool
    ) -> None:
        self.store, self.settings, self.location, self.dry_run = store, settings, location, dry_run
        self.deleted = self.restored = self.requests = 0
        self.failures: dict[str, str] = {}

    def delete(self, manifests: Sequence[Entry]) -> None:
        for entry in manifests:
            assert entry.parsed is not None
            if self.dry_run:
                self.deleted += 1
                continue
            try:
                self._delete(entry.info.key, entry.info.etag, entry.parsed.folder)
            except S3KVError as exc:
                self.failures[entry.info.key] = str(exc)

    def _delete(self, key: str, etag: str | None, folder: str) -> None:
        try:
            data = read_capped(self.store, key, self.settings)
        except ObjectNotFoundError:
            return  # someone else removed it
        if self._has_block(folder):
            return  # a writer started during the run: its blocks need the manifest
        self.requests += 1
        failed, gone = with_retries(
            lambda: self.store.delete_if_unchanged([(key, etag)]), self.settings
        )
        if failed:
            self.failures.update(failed)
            return
        if gone:
            return  # rewritten or removed meanwhile: not ours to count
        if self._has_block(folder):
            with_retries(lambda: self.store.put(key, data, RESTORE), self.settings)
            self.restored += 1
            return
        self.deleted += 1

    def _has_block(self, folder: str) -> bool:
        """Whether any rank of the namespace holds a block now (a fresh listing)."""
        prefix = root_of(self.location.prefix) + folder + "_r"
        for info in self.store.list(prefix):
            try:
                parsed = parse_key(info.key)
            except NotAnS3KVKeyError:
                continue
            if parsed.kind == "block" and parsed.folder == folder:
                return True
        return False
