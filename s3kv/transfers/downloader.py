"""Reading a namespace's blocks: lookups, verified zero-copy loads, ranged reads."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor

import s3kv.integrity as integrity
from s3kv.errors import (
    ChecksumMismatchError,
    InvalidInputError,
    ManifestMismatchError,
    ManifestMissingError,
    ObjectNotFoundError,
    SizeMismatchError,
    TransientStoreError,
)
from s3kv.naming.keys import KeyStyle
from s3kv.naming.location import Location
from s3kv.naming.namespace import Namespace
from s3kv.report import TransferReport
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import Cancel, ObjectInfo, Store
from s3kv.transfers.jobs import BlockResult, Done, TransferJob, on_pool
from s3kv.transfers.lookup import LookupStats, PresenceCache, prefix_length
from s3kv.transfers.transfer import (
    BlockBuffer,
    BlockId,
    Transfer,
    as_bytes_view,
    offload_key_of,
    refuse_duplicates,
)

INTEGRITY_RETRIES = 1
"""Re-read a block once after a checksum mismatch: it may have been damaged in flight."""


class Downloader(Transfer):
    """Looks up and loads blocks of one namespace from a location.

    By default the namespace's manifest must exist and hash to the namespace's digest
    (checked once, before the first read); pass ``require_manifest=False`` for caches
    written without one (vLLM's object-store tier).

    A block that carries no recorded checksum (the obj tier's, another client's, any
    block in a directory) cannot be verified, only size-checked: every block of a
    namespace has one size (the CPU row stride), taken from the caller's buffer, else
    from ``block_size_bytes``, else learned from the first block whose checksum this
    Downloader verified. A 0-byte block is never valid. Such blocks read from S3 are
    reported done and listed in the report's ``unverified_keys`` (a directory records no
    checksum by design: its blocks are not counted).
    """

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
        require_manifest: bool = True,
        lookup_fanout: int | None = None,
        presence_cache: PresenceCache | None = None,
        block_size_bytes: int | None = None,
    ) -> None:
        super().__init__(
            location,
            namespace,
            settings=settings,
            style=style,
            store=store,
            concurrency=concurrency,
            executor=executor,
        )
        if block_size_bytes is not None and block_size_bytes <= 0:
            raise InvalidInputError(f"block_size_bytes must be positive; got {block_size_bytes}")
        self.block_size_bytes = block_size_bytes
        self.require_manifest = require_manifest
        # None: sized per chain so a lookup takes at most s3kv.transfers.lookup.ROUNDS round trips.
        self.lookup_fanout = None if lookup_fanout is None else max(1, lookup_fanout)
        self.presence = presence_cache if presence_cache is not None else PresenceCache()
        self.last_lookup = LookupStats()
        self._manifest_checked = False

    # -- manifest ---------------------------------------------------------------------

    def verify_manifest(self, *, allow_missing: bool = False) -> Namespace | None:
        """Check that the stored manifest's fields hash to this namespace's digest.

        Returns the namespace it describes, or None if there is none and
        ``allow_missing`` is set; otherwise raises :class:`ManifestMissingError`.
        """
        self._check_open()
        url = self.url_for(self.keys.config_key())
        stored = self.read_manifest()
        if stored is None:
            if allow_missing:
                return None
            raise ManifestMissingError(
                f"{url}: no manifest; push the cache with s3kv (which writes it first), or "
                "read without one (require_manifest=False) if vLLM's object-store tier wrote it"
            )
        if stored.digest != self.namespace.digest:
            raise ManifestMismatchError(
                f"{url}: its fields hash to {stored.digest}, not to the folder's digest "
                f"{self.namespace.digest}.\n  stored: {stored.fields}\n"
                f"  expected: {self.namespace.fields}"
            )
        return stored

    def _check_manifest(self) -> None:
        if not self._manifest_checked:
            self.verify_manifest(allow_missing=not self.require_manifest)
            self._manifest_checked = True

    # -- presence ---------------------------------------------------------------------

    def contains(self, keys: Sequence[BlockId]) -> list[bool]:
        """Whether each block exists (concurrent HEADs; answers are cached)."""
        self._check_open()
        self._check_manifest()
        return self._probe([self.keys.key_for(offload_key_of(k)) for k in keys])

    def lookup(self, keys: Sequence[BlockId]) -> int:
        """How many leading blocks of the chain ``keys`` are stored (vLLM's prefix hits).

        At most 3 round trips of concurrent HEADs (2,048 keys: at most 38 HEADs); see
        :mod:`s3kv.transfers.lookup` for the fanout's cost and for chains with holes.
        """
        self._check_open()
        self._check_manifest()
        object_keys = [self.keys.key_for(offload_key_of(k)) for k in keys]
        stats = LookupStats()
        sent_before = self._requests

        def probe(positions: Sequence[int]) -> Sequence[bool]:
            return self._probe([object_keys[p] for p in positions])

        result = prefix_length(len(object_keys), probe, stats=stats, fanout=self.lookup_fanout)
        stats.requests = self._requests - sent_before
        self.last_lookup = stats
        return result

    _requests = 0

    def _probe(self, object_keys: Sequence[str]) -> list[bool]:
        answers: list[bool | None] = [self.presence.get(k) for k in object_keys]
        unknown = [i for i, a in enumerate(answers) if a is None]
        if unknown:
            self._requests += len(unknown)
            if len(unknown) == 1:
                found = [self._present(object_keys[unknown[0]])]
            else:
                found = list(self.executor.map(self._present, [object_keys[i] for i in unknown]))
            for i, present in zip(unknown, found):
                answers[i] = present
                self.presence.put(object_keys[i], present)
        return [bool(a) for a in answers]

    def _present(self, object_key: str) -> bool:
        """A lookup's HEAD: whether the object exists."""
        return with_retries(lambda: self.store.head(object_key), self.settings) is not None

    # -- loads ------------------------------------------------------------------------

    def get_blocks(
        self,
        keys: Sequence[BlockId],
        into: Sequence[BlockBuffer] | Mapping[bytes, BlockBuffer] | None = None,
    ) -> TransferReport:
        """Load blocks and wait. See :meth:`submit_get_blocks`."""
        return self.submit_get_blocks(keys, into).wait()

    def submit_get_blocks(
        self,
        keys: Sequence[BlockId],
        into: Sequence[BlockBuffer] | Mapping[bytes, BlockBuffer] | None = None,
        *,
        on_done: Callable[[TransferJob], None] | None = None,
    ) -> TransferJob:
        """Start loading blocks; returns a job to poll, wait on or cancel.

        With ``into`` (a sequence of writable buffers aligned with ``keys``, or a mapping
        key -> buffer, e.g. rows of a preallocated array), bytes land directly in the
        buffers; each buffer must be exactly its block's size. Without it, the report's
        ``data`` holds the bytes. Buffers are checked before any request (contiguous,
        writable, non-empty, readable as bytes; else :class:`InvalidInputError`), and a
        key given twice is refused. A block that fails, whatever the reason (checksum,
        size, a read that died midway), is reported failed and its buffer zeroed; a
        block that does not exist is reported missing and its buffer left alone.
        ``on_done(job)`` runs once, on the thread that finished the last block.
        """
        self._check_open()
        self._check_manifest()
        offload_keys = [offload_key_of(k) for k in keys]
        refuse_duplicates(offload_keys)
        buffers: list[memoryview | None]
        if into is None:
            buffers = [None] * len(offload_keys)
        elif isinstance(into, Mapping):
            lacking = [k for k in offload_keys if k not in into]
            if lacking:
                raise InvalidInputError(
                    f"into has no buffer for block {lacking[0].hex()}"
                    + (f" (nor for {len(lacking) - 1} more)" if len(lacking) > 1 else "")
                    + "; map every key loaded to its buffer"
                )
            buffers = [as_bytes_view(into[k], k, writable=True) for k in offload_keys]
        else:
            if len(into) != len(offload_keys):
                raise InvalidInputError(
                    f"into has {len(into)} buffers for {len(offload_keys)} keys; pass one "
                    "buffer per key"
                )
            buffers = [as_bytes_view(b, k, writable=True) for k, b in zip(offload_keys, into)]
        parts, window = 1, self.concurrency
        if into is not None and all(
            b is not None and self.store.can_submit(len(b)) for b in buffers
        ):
            largest = max((len(b) for b in buffers if b is not None), default=0)
            parts, window = self.store.plan_loads(len(buffers), largest, self.concurrency)
        pool = self.executor
        attempts = [
            _GetAttempt(self, pool, k, b, parts=parts) for k, b in zip(offload_keys, buffers)
        ]
        return TransferJob(
            "download", attempts, window=window, settings=self.settings, on_done=on_done
        )

    def _loaded(
        self,
        key: bytes,
        object_key: str,
        view: memoryview,
        info: ObjectInfo,
        where: str,
        data: bytes | None = None,
    ) -> BlockResult:
        """A block that arrived whole: its checksum verified (raises
        :class:`ChecksumMismatchError`), or, without one, its size checked (raises
        :class:`SizeMismatchError`); its presence remembered, its result."""
        if info.checksum is not None:
            integrity.verify(info.checksum, view, where=where)
            if self.block_size_bytes is None and len(view):
                self.block_size_bytes = len(view)  # the namespace's row size, now known
        else:
            expected = len(view) if data is None else self.block_size_bytes
            integrity.check_size(len(view), expected, where=where)
        self.presence.put(object_key, True)
        # "unverified" is a block read from S3 without its recorded checksum; a directory
        # records none by design, so its blocks are never counted (docs/operations.md).
        verified = info.checksum is not None or self.store.is_local
        return BlockResult(key, "done", nbytes=info.size, verified=verified, data=data)

    def get_range(self, key: BlockId, *, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of one block (``end`` exclusive; None: to the end).

        Not checksummed: a checksum covers the whole block.
        """
        self._check_open()
        if start < 0 or (end is not None and end < start):
            raise InvalidInputError(f"bad range start={start}, end={end}; need 0 <= start <= end")
        self._check_manifest()
        object_key = self.keys.key_for(offload_key_of(key))
        return with_retries(
            lambda: self.store.get_range(object_key, start=start, end=end), self.settings
        )


def _zero(buffer: memoryview | None) -> None:
    """Wipe a caller's buffer so no partial or corrupt block can be mistaken for data."""
    if buffer is None or len(buffer) == 0:
        return
    ctypes.memset((ctypes.c_char * len(buffer)).from_buffer(buffer), 0, len(buffer))


class _GetAttempt:
    """One block's GET: into its buffer (submitted on awscrt, else a blocking call on the
    pool) or, without a buffer, as bytes (on the pool)."""

    __slots__ = (
        "buffer", "data", "downloader", "key", "object_key", "parts", "pool", "rereads",
        "where",
    )  # fmt: skip

    def __init__(
        self,
        downloader: Downloader,
        pool: Executor,
        key: bytes,
        buffer: memoryview | None,
        *,
        parts: int = 1,
    ) -> None:
        self.downloader, self.pool, self.key, self.buffer = downloader, pool, key, buffer
        self.parts = parts
        self.object_key = downloader.keys.key_for(key)
        self.where = downloader.url_for(self.object_key)
        self.rereads = 0
        self.data: bytes | None = None  # the block's bytes, when there is no buffer

    def start(self, done: Done) -> Cancel:
        down, buffer = self.downloader, self.buffer
        finished = done.guard(lambda info, error: self._finished(done, info, error))
        if buffer is not None and down.store.can_submit(len(buffer)):
            return down.store.submit_get_into(self.object_key, buffer, finished, parts=self.parts)
        return on_pool(self.pool, self._get, finished)

    def _get(self) -> ObjectInfo:
        """The blocking GET, on the pool; never more than a block of this namespace, where
        its size is known."""
        store = self.downloader.store
        if self.buffer is not None:
            return store.get_into(self.object_key, self.buffer)
        self.data, info = store.get(self.object_key, max_bytes=self.downloader.block_size_bytes)
        return info

    def _finished(self, done: Done, info: ObjectInfo | None, error: BaseException | None) -> None:
        down, key = self.downloader, self.key
        if isinstance(error, ObjectNotFoundError):
            if not error.bound:  # a 404 that names no key: a bound look tells, on the pool
                on_pool(self.pool, self._missing, done)
                return
            down.presence.forget(self.object_key)
            done(BlockResult(key, "missing"), None)
            return
        if isinstance(error, SizeMismatchError):
            done(self.give_up(str(error)), None)
            return
        if error is not None or info is None:
            done(None, error)  # the job retries transient errors, then give_up()
            return
        view = self.buffer if self.buffer is not None else memoryview(self.data or b"")
        try:
            result = down._loaded(key, self.object_key, view, info, self.where, self.data)
        except SizeMismatchError as exc:
            done(self.give_up(str(exc)), None)
            return
        except ChecksumMismatchError as exc:
            if self.rereads < INTEGRITY_RETRIES:  # may have been damaged in flight
                self.rereads += 1
                done(None, TransientStoreError(str(exc)))
            else:
                done(self.give_up(str(exc)), None)
            return
        done(result, None)

    def _missing(self) -> BlockResult:
        """A 404 nothing bound to its request: missing if a bound look finds no object,
        else the 404 was another request's answer (:class:`TransientStoreError`)."""
        if self.downloader.store.head(self.object_key) is not None:
            raise TransientStoreError(
                f"GET {self.where}: answered 404, but the object is there: the 404 was "
                "another request's answer (a stale answer on the connection); retried"
            )
        self.downloader.presence.forget(self.object_key)
        return BlockResult(self.key, "missing")

    def give_up(self, reason: str) -> BlockResult:
        _zero(self.buffer)  # no partial or corrupt block may be mistaken for data
        return BlockResult(self.key, "failed", reason=reason)
