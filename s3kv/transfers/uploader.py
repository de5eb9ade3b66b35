"""Writing a namespace's manifest and blocks: create-only, concurrent, checksummed."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor

import s3kv.integrity as integrity
from s3kv.errors import AccessDeniedError, NamespaceConflictError, S3KVError, StoreFullError
from s3kv.naming.chains import parent_metadata
from s3kv.naming.keys import KeyStyle
from s3kv.naming.location import Location
from s3kv.naming.manifest import Provenance, with_provenance
from s3kv.naming.namespace import Namespace
from s3kv.report import TransferReport
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import Cancel, PutOptions, Store
from s3kv.transfers.jobs import BlockResult, Done, TransferJob, on_pool, submit_on_pool
from s3kv.transfers.stored_manifest import read_capped
from s3kv.transfers.transfer import (
    BLOCK_TAGS,
    BlockBuffer,
    BlockId,
    BlockIdT,
    Transfer,
    as_bytes_view,
    offload_key_of,
    pairs_of,
    refuse_duplicates,
)
from s3kv.transfers.writes import landed, prove_create_only, put_create_only, write_id

MANIFEST_OPTIONS = PutOptions(create_only=True)
MANIFEST_RECHECK_SECONDS = 30.0
"""How often a long-lived Uploader (the vLLM tier's) checks that its manifest is still
there before it stores more blocks: ``gc --delete-empty-manifests`` may have removed it
while the namespace was empty. One look per interval, only when blocks are stored, and
one per interval however it ends (a check that failed is not repeated on the next job)."""

MANIFEST_RECHECK_DEADLINE_SECONDS = 10.0
"""The longest one re-check may retry (each attempt bounded by the store's timeouts)."""

REFUSED: tuple[type[BaseException], ...] = (AccessDeniedError, StoreFullError)
"""Errors of a write the store refused for good (denied; full: 507, a quota), reported
to :attr:`Uploader.on_write_refused`."""

logger = logging.getLogger("s3kv")


class Uploader(Transfer):
    """Stores blocks of one namespace at a location (``s3://bucket/prefix`` or a directory).

    >>> with Uploader("s3://bucket/kv", namespace) as up:       # doctest: +SKIP
    ...     report = up.put_blocks({offload_key: row, ...})
    ...     report.stored, report.already_present, report.failed

    The manifest (``config.json``) is created before the first block is written, and
    proves the store honours create-only writes (:mod:`s3kv.transfers.writes`). Blocks are written
    create-only: an existing block is never rewritten.

    The manifest it creates records when, by which s3kv and, given ``vllm_version`` (the
    vLLM tier gives its own), for which vLLM (:class:`s3kv.naming.manifest.Provenance`; not
    hashed: the folder digest is vLLM's). ``s3kv ls`` shows them.
    """

    _manifest_ready = False
    _manifest_data: bytes | None = None
    _manifest_seen_at = 0.0
    manifest_recheck_seconds = MANIFEST_RECHECK_SECONDS
    recheck_beside = False
    """True (the vLLM tier's): a due re-check of the manifest runs on a thread of its
    own, so submitting blocks never waits on the network; False: before the job."""
    on_write_refused: Callable[[BaseException], None] | None = None
    """Told of every block write the store refused for good (:data:`REFUSED`)."""

    def __init__(
        self,
        location: str | os.PathLike[str] | Location,
        namespace: Namespace,
        *,
        settings: S3Settings | None = None,
        style: KeyStyle = "s3kv",
        store: Store | None = None,
        concurrency: int | None = None,
        executor: Executor | None = None,
        vllm_version: str | None = None,
    ) -> None:
        super().__init__(
            location, namespace, settings=settings, style=style, store=store,
            concurrency=concurrency, executor=executor,
        )  # fmt: skip
        self.vllm_version = vllm_version
        self.damaged: dict[str, str] = {}
        """Object key -> ETag of a stored copy known damaged (a load failed its
        checksum): the next store of that key replaces exactly that copy
        (``If-Match``) instead of finding it present."""
        self.healed = 0
        """Damaged copies replaced (a running total)."""
        self._rechecking = threading.Lock()
        self._counting = threading.Lock()

    def ensure_manifest(self) -> bool:
        """Create the namespace's ``config.json`` if absent; True if this call created it.

        An existing manifest must hold the same fields, else :class:`NamespaceConflictError`
        shows both; an unreadable one raises :class:`ManifestError`. Once found, it is
        looked for again (a HEAD) at most every ``manifest_recheck_seconds``, and written
        again if it vanished (``gc --delete-empty-manifests`` of a namespace that was empty).
        With ``recheck_beside`` set, :meth:`submit_put_blocks` runs that re-check on a
        thread of its own.
        """
        self._check_open()
        if self._manifest_ready and not self._manifest_vanished():
            return False
        # Read first: a cluster holding only a reader policy can then start on a cache a
        # writer already described; the create-only PUT settles races between writers.
        theirs = self.read_manifest()
        created = False
        key = self.keys.config_key()
        # A manifest that vanished is written again as it was (its record included).
        data = self._manifest_data or with_provenance(
            self.namespace.fields, Provenance.now(vllm_version=self.vllm_version)
        )
        if theirs is None:
            created = put_create_only(self.store, key, data, MANIFEST_OPTIONS, self.settings)
            if not created:
                theirs = self.read_manifest()
        if theirs is not None and theirs.fields != self.namespace.fields:
            raise NamespaceConflictError(
                f"{self.url_for(self.keys.config_key())} holds a different run config than "
                f"this namespace.\n  stored: {theirs.fields}\n  ours:   {self.namespace.fields}\n"
                "Two configurations hashed to one folder digest should never happen; "
                "check who wrote this manifest, or use another prefix."
            )
        stored = data if created else read_capped(self.store, key, self.settings)
        prove_create_only(self.store, key, stored, self.settings)
        self._manifest_data = stored
        self._manifest_ready = True
        self._manifest_seen_at = time.monotonic()
        return created

    @property
    def manifest_data(self) -> bytes | None:
        """The manifest's bytes as stored, once :meth:`ensure_manifest` found or wrote it."""
        return self._manifest_data if self._manifest_ready else None

    def adopt_manifest(self, data: bytes) -> None:
        """Take the manifest another uploader of this location found or wrote
        (:attr:`manifest_data`; the vLLM tier's, in EngineCore, for its data path): no
        request now; re-checks go on as after :meth:`ensure_manifest`."""
        if not self._manifest_ready:
            self._manifest_data = data
            self._manifest_ready = True
            self._manifest_seen_at = time.monotonic()

    def _recheck_due(self) -> bool:
        return time.monotonic() - self._manifest_seen_at >= self.manifest_recheck_seconds

    def _manifest_vanished(self) -> bool:
        """Whether a re-check (due every ``manifest_recheck_seconds``) finds it gone.

        The next one is due an interval after this one ends, however it ends: during an
        outage the store is not asked on every job. It retries for
        :data:`MANIFEST_RECHECK_DEADLINE_SECONDS` at most."""
        if not self._recheck_due():
            return False
        key = self.keys.config_key()
        deadline = time.monotonic() + min(
            MANIFEST_RECHECK_DEADLINE_SECONDS, self.settings.deadline_seconds
        )
        try:
            info = with_retries(lambda: self.store.head(key), self.settings, deadline=deadline)
        except S3KVError as exc:  # blocks can still be stored; try again next time
            logger.debug("s3kv: re-check of %s failed: %s", self.url_for(key), exc)
            self._manifest_seen_at = time.monotonic()
            return False
        if info is not None:
            return False
        logger.info("s3kv: %s vanished (collected by gc?); writing it again", self.url_for(key))
        return True

    def _recheck_beside(self) -> None:
        """Start a due re-check on a thread of its own (one at a time)."""
        if not self._recheck_due() or not self._rechecking.acquire(blocking=False):
            return

        def recheck() -> None:
            try:
                self.ensure_manifest()
            except S3KVError as exc:  # blocks can still be stored; try again next time
                logger.warning("s3kv: could not write %s again: %s",
                               self.url_for(self.keys.config_key()), exc)  # fmt: skip
            finally:
                self._rechecking.release()

        threading.Thread(target=recheck, name="s3kv-manifest-recheck", daemon=True).start()

    def put_blocks(
        self,
        items: Mapping[BlockIdT, BlockBuffer] | Iterable[tuple[BlockId, BlockBuffer]],
        *,
        parents: Mapping[bytes, bytes] | None = None,
    ) -> TransferReport:
        """Store blocks and wait; returns what was stored, already present and failed."""
        return self.submit_put_blocks(items, parents=parents).wait()

    def submit_put_blocks(
        self,
        items: Mapping[BlockIdT, BlockBuffer] | Iterable[tuple[BlockId, BlockBuffer]],
        *,
        on_done: Callable[[TransferJob], None] | None = None,
        parents: Mapping[bytes, bytes] | None = None,
    ) -> TransferJob:
        """Start storing blocks; returns a job to poll, wait on or cancel.

        ``items`` maps OffloadKeys (or ``(hash, group)``) to bytes-like buffers (bytes,
        bytearray, memoryview, numpy rows). Buffers are sent as they are, not copied;
        keep them unchanged until the job is done. ``on_done(job)`` runs once, on the
        thread that finished the last block, after the report is ready. Buffers are
        checked before any request (contiguous, non-empty, readable as bytes; else
        :class:`InvalidInputError`), and a key given twice is refused, so each key lands
        in exactly one outcome.

        ``parents`` maps an OffloadKey to its parent's (the block before it in its
        chain), written with the block as metadata (:mod:`s3kv.naming.chains`): ``gc`` then
        keeps a prefix of every chain. vLLM's tier passes what the scheduler knows.
        """
        self._check_open()
        parents = parents or {}
        blocks = []
        for block, buffer in pairs_of(items):
            key = offload_key_of(block)
            blocks.append((key, as_bytes_view(buffer, key, writable=False)))
        refuse_duplicates(key for key, _ in blocks)
        if self.recheck_beside and self._manifest_ready:
            self._recheck_beside()
        else:
            self.ensure_manifest()
        pool = self.executor
        attempts = [_PutAttempt(self, pool, key, view, parents.get(key)) for key, view in blocks]
        return TransferJob(
            "upload", attempts, window=self.concurrency, settings=self.settings, on_done=on_done
        )


class _PutAttempt:
    """One block's create-only PUT: submitted (awscrt) or on the pool (any other store)."""

    __slots__ = ("key", "object_key", "options", "parent", "pool", "uploader", "view")

    def __init__(
        self,
        uploader: Uploader,
        pool: Executor,
        key: bytes,
        view: memoryview,
        parent: bytes | None,
    ) -> None:
        self.uploader, self.pool, self.key, self.view = uploader, pool, key, view
        self.parent = parent
        self.object_key = uploader.keys.key_for(key)
        self.options: PutOptions | None = None  # at the first start, off the caller's thread

    def start(self, done: Done) -> Cancel:
        up = self.uploader

        def finished(created: bool | None, error: BaseException | None) -> None:
            options = self._options()  # taken before the request went out
            if error is not None:
                self._refused(error)
                done(None, error)
            elif created:
                done(self._stored(options), None)
            else:
                # 412: a HEAD tells whose object it is (writes.landed), on the pool
                # (a blocking request on a transport's thread could stall its loop).
                on_pool(self.pool, lambda: self._landed(options), done)

        if up.store.can_submit(len(self.view)):
            # Its checksum (and an MD5, on stores that echo none) are taken on the pool:
            # the completion that starts it runs on the client's event loop.
            return submit_on_pool(self.pool, lambda: up.store.submit_put(
                self.object_key, self.view, self._options(), done.guard(finished)), done)
        return on_pool(self.pool, lambda: self._put(self._options()), done)

    def _options(self) -> PutOptions:
        """The write's options, taken at its first start (off the thread that asks); a
        retry reuses them, its checksum too: the bytes have not changed."""
        if self.options is None:
            up = self.uploader
            bad = up.damaged.get(self.object_key)
            self.options = PutOptions(
                create_only=bad is None,
                if_match=bad,  # replaces the damaged copy, and nothing else
                checksum=integrity.compute(up.settings.checksum, self.view),
                tags=BLOCK_TAGS,
                write_id=write_id(),
                metadata=parent_metadata(self.parent),
            )
        return self.options

    def _put(self, options: PutOptions) -> BlockResult:
        """The blocking PUT, on the pool: its 412, if any, settled there too."""
        try:
            created = self.uploader.store.put(self.object_key, self.view, options)
        except BaseException as exc:
            self._refused(exc)
            raise
        if created:
            return self._stored(options)
        return self._landed(options)

    def _landed(self, options: PutOptions) -> BlockResult:
        """A 412: our write after all (a lost answer), or another object. To an
        ``If-Match`` write: the damaged copy was replaced since (by another writer)."""
        if landed(self.uploader.store, self.object_key, options, len(self.view)):
            return self._stored(options)
        if options.if_match is not None:
            self.uploader.damaged.pop(self.object_key, None)
        return BlockResult(self.key, "already_present")

    def _stored(self, options: PutOptions) -> BlockResult:
        up = self.uploader
        if options.if_match is not None and up.damaged.pop(self.object_key, None) is not None:
            with up._counting:
                up.healed += 1
        return BlockResult(self.key, "done", nbytes=len(self.view))

    def _refused(self, error: BaseException) -> None:
        notify = self.uploader.on_write_refused
        if notify is not None and isinstance(error, REFUSED):
            notify(error)

    def give_up(self, reason: str) -> BlockResult:
        return BlockResult(self.key, "failed", reason=reason)
