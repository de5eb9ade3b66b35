"""The store interface the transfer code runs on: S3 (boto3) or a local directory.

Keys are full object keys (prefix included) for S3, and paths relative to the root for a
directory. Operations raise errors from :mod:`s3kv.errors` only; retrying transient
failures is the caller's job (see :mod:`s3kv.retry`), so a store never hides one; except
listing pages, which a store retries under the same policy (a generator cannot be
retried from outside). Each request is bounded by the connect and read timeouts.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timezone

from s3kv.errors import StoreError
from s3kv.integrity import Buffer, Checksum
from s3kv.stores.memory import mapped

DELETE_BATCH = 1000
"""S3's limit of keys per DeleteObjects request."""

Cancel = Callable[[], None]
"""Cancels a submitted request: it ends soon with an error, writes nothing more into
the caller's buffer, and frees its connection."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a listing or HEAD tells about one object."""

    key: str
    size: int
    last_modified: datetime | None = None
    checksum: Checksum | None = None
    """s3kv's recorded checksum (from metadata); None when the store keeps none."""
    etag: str | None = None
    write_id: str | None = None
    """The token of the write that stored it (:attr:`PutOptions.write_id`), if any."""


@dataclass(frozen=True, slots=True)
class ObjectDetails:
    """What a HEAD tells in full (:meth:`Store.describe`): more than a listing can."""

    info: ObjectInfo
    metadata: Mapping[str, str] = field(default_factory=dict)
    """Every user metadata field (``x-amz-meta-*`` without the prefix), as stored."""
    server_time: datetime | None = None
    """The store's clock when it answered (its ``Date`` header); None if not known."""


@dataclass(frozen=True, slots=True)
class ObjectVersion:
    """One version of an object in a versioned bucket (:meth:`Store.list_versions`)."""

    key: str
    version_id: str
    size: int
    latest: bool
    delete_marker: bool = False
    last_modified: datetime | None = None


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """One request a store sent, as it ended (:attr:`Store.on_request`)."""

    operation: str
    """``get``, ``put``, ``head``, ``copy`` (a renewal) or ``tagging``."""
    key: str
    outcome: str
    """``ok``, ``created``, ``exists`` (a create-only PUT found the object), ``not_found``,
    ``size_mismatch``, ``transient``, ``denied`` or ``error``."""
    attempt: int = 1
    """The attempt of the retry loop that sent it (:data:`s3kv.retry.ATTEMPT`): above 1,
    a retry."""
    nbytes: int = 0
    """Payload bytes: the body sent (put) or read (get)."""
    seconds: float = 0.0
    info: ObjectInfo | None = None
    """What a ``get`` or ``head`` that found the object answered."""
    ended: float = 0.0
    """``time.monotonic()`` when it ended (one clock for the host's processes: an I/O
    process's requests are told to EngineCore later); 0: unknown."""


RequestHook = Callable[[RequestEvent], None]


class Staged:
    """A temp file of :meth:`Store.stage`: its ``path`` (through the folder's descriptor,
    so whoever opens it resolves no folder again), the final file's name (for messages),
    ``publish(create_only)``: True if it is now the key's file, False if create-only and
    a file was there; and ``close()``: the temp file removed unless published, the folder
    let go (once; later calls do nothing)."""

    __slots__ = ("_close", "_publish", "final", "path")

    def __init__(self, path: str, final: str, publish: Callable[[bool], bool],
                 close: Callable[[], None]) -> None:
        self.path, self.final, self._publish, self._close = path, final, publish, close

    def publish(self, create_only: bool) -> bool:
        return self._publish(create_only)

    def close(self) -> None:
        close, self._close = self._close, _closed
        close()


def _closed() -> None:
    """A :class:`Staged` closed already."""


@dataclass(frozen=True, slots=True)
class MultipartUpload:
    """An upload started and never completed or aborted."""

    key: str
    upload_id: str
    initiated: datetime | None = None


@dataclass(frozen=True, slots=True)
class PutOptions:
    """How to write an object."""

    create_only: bool = True
    """Write only if absent (``If-None-Match: *``); an existing object is left alone."""
    checksum: Checksum | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    if_match: str | None = None
    """Overwrite only the object of this ETag (``If-Match``; sent unquoted, which both
    moto and Ceph RGW 16 accept); a write whose condition fails returns False. S3 only:
    a directory has no ETag (its callers re-check the bytes first)."""
    write_id: str | None = None
    """A token of this write, kept in metadata (``x-amz-meta-s3kv-write-id``; not by a
    directory): after a lost answer and a 412, it tells our own write from another's."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """More user metadata to store with the object (``x-amz-meta-<name>``; not by a
    directory), such as a block's place in its chain (:mod:`s3kv.naming.chains`)."""


class Store(abc.ABC):
    """A flat key space of immutable objects.

    What a store can do beyond the methods is said by its capabilities (class
    attributes), never by its type: callers ask the store."""

    #: a short name for messages: "s3://bucket" or the directory.
    name: str

    records_checksums: bool = False
    """Each block's checksum is stored with it (S3: in the object's metadata)."""

    has_tags: bool = False
    """Objects carry tags (S3): the lifecycle rule's tag, kept on renewal."""

    is_local: bool = False
    """Objects are files on this machine (vLLM's filesystem-tier layout): no wire between,
    no ETags, no checksums recorded."""

    on_request: RequestHook | None = None
    """Called with a :class:`RequestEvent` for every GET, PUT, HEAD, renewal copy and
    tagging request the store sends, once it ended (on the thread that saw it end; it
    must be quick and must not raise). None (the default): nothing is measured. Set it
    once, before the store's first request (:mod:`s3kv.stores.hooks`)."""

    def copies_from(self, source: Store) -> bool:
        """Whether :meth:`copy_from` can copy from ``source`` inside the store (no byte
        through this process)."""
        return False

    @abc.abstractmethod
    def get(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
        """The whole object. With ``max_bytes``, a larger object raises
        :class:`s3kv.errors.SizeMismatchError` before its body is read."""

    @abc.abstractmethod
    def get_into(self, key: str, buffer: memoryview) -> ObjectInfo:
        """Read the object straight into ``buffer``, which must be exactly its size.

        Raises :class:`s3kv.errors.SizeMismatchError` (naming both sizes) before writing
        anything when the sizes differ.
        """

    @abc.abstractmethod
    def get_range(self, key: str, *, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (``end`` exclusive; None: to the end)."""

    @abc.abstractmethod
    def put(self, key: str, data: Buffer, options: PutOptions) -> bool:
        """Write an object; False if ``create_only`` and it already existed."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Metadata of the object, or None if it does not exist."""

    @abc.abstractmethod
    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order, page by page."""

    def passed_over(self) -> dict[str, str]:
        """Entries this store's listings met but did not list, ``{key: what it is}``:
        none in a bucket (see :meth:`s3kv.stores.local.LocalStore.passed_over`)."""
        return {}

    @abc.abstractmethod
    def delete_many(self, keys: Sequence[str]) -> dict[str, str]:
        """Delete keys (in batches of up to 1,000); returns ``{key: reason}`` of failures."""

    def delete(self, key: str, *, if_match: str | None = None) -> bool:
        """Delete one key; False if ``if_match`` (an ETag) no longer matches or the key is
        gone. Stores that ignore conditional deletes (Ceph RGW 16, a directory) delete
        anyway: callers re-check the object right before."""
        failed = self.delete_many([key])
        if failed:
            raise StoreError(f"delete {key}: {failed[key]}")
        return True

    def get_to_path(self, key: str, path: str, *, max_bytes: int) -> ObjectInfo:
        """The object written into the (existing, empty) file at ``path``: at most
        ``max_bytes`` bytes (a larger object raises :class:`SizeMismatchError` unread).
        awscrt writes it in C (:class:`~s3kv.stores.crt.CrtS3Store`); by default
        :meth:`get`, then one write."""
        data, info = self.get(key, max_bytes=max_bytes)
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate()
        return info

    def put_from_path(self, key: str, path: str, size: int, options: PutOptions) -> bool:
        """:meth:`put` of the ``size`` bytes of the file at ``path``. awscrt reads it in C;
        by default its pages are mapped and put as a buffer (no copy)."""
        with mapped(path, size) as view:
            return self.put(key, view, options)

    def stage(self, key: str) -> Staged:
        """A directory's temp file for ``key``, filled by path, then published (where
        :attr:`is_local`: :meth:`s3kv.stores.local.LocalStore.stage`); the caller closes
        it."""
        raise NotImplementedError(f"{self.name} stages no files")

    def opened(self, key: str) -> AbstractContextManager[tuple[str, int]]:
        """A directory's file for ``key`` held open for a reader by path, and its size
        (where :attr:`is_local`: :meth:`s3kv.stores.local.LocalStore.opened`)."""
        raise NotImplementedError(f"{self.name} holds no files")

    submits_files = False
    """Whether :meth:`submit_get_to_path` starts a GET into a file without blocking."""

    def submit_get_to_path(
        self,
        key: str,
        path: str,
        max_bytes: int,
        done: Callable[[ObjectInfo | None, BaseException | None], None],
    ) -> Cancel:
        """Start :meth:`get_to_path` without blocking (where :attr:`submits_files`);
        ``done(info, error)`` runs later. Returns a function that cancels the request."""
        raise NotImplementedError

    def can_submit(self, size: int) -> bool:
        """Whether ``submit_put``/``submit_get_into`` take a block of ``size`` bytes."""
        return False

    def submit_put(
        self,
        key: str,
        data: memoryview,
        options: PutOptions,
        done: Callable[[bool | None, BaseException | None], None],
        *,
        path: str | None = None,
    ) -> Cancel:
        """Start :meth:`put` without blocking; ``done(created, error)`` runs later.
        With ``path``, the store sends that file (``data``: its bytes, mapped). Returns a
        function that cancels the request."""
        raise NotImplementedError

    def submit_get_into(
        self,
        key: str,
        buffer: memoryview,
        done: Callable[[ObjectInfo | None, BaseException | None], None],
        *,
        parts: int = 1,
    ) -> Cancel:
        """Start :meth:`get_into` without blocking; ``done(info, error)`` runs later.
        ``parts``: read the block as that many ranged parts at once (see
        :meth:`plan_loads`). Returns a function that cancels the request (nothing lands
        in ``buffer`` once it ended)."""
        raise NotImplementedError

    def plan_loads(self, count: int, size: int, window: int) -> tuple[int, int]:
        """How to load ``count`` blocks of ``size`` bytes in one job: (ranged parts per
        block, blocks in flight). The default: whole blocks, ``window`` at a time."""
        return 1, window

    def copy_from(self, source: Store, source_key: str, key: str) -> bool:
        """Server-side copy when both stores share an endpoint; False if not possible."""
        return False

    def describe(self, key: str) -> ObjectDetails | None:
        """A HEAD that also returns every user metadata field and the store's clock;
        None if the object does not exist. By default :meth:`head` with the local clock
        (a directory's clock is this machine's)."""
        info = self.head(key)
        if info is None:
            return None
        return ObjectDetails(info, {}, datetime.now(timezone.utc))

    def renew(
        self, key: str, *, unmodified_since: datetime, metadata: Mapping[str, str]
    ) -> datetime | None:
        """Make the object's Last-Modified now, its bytes and ``metadata`` unchanged.

        On S3 a server-side copy of the object onto itself (no bytes through the client)
        with ``metadata`` written back (all of it, as :meth:`describe` read it), sent
        only while the object's Last-Modified is still ``unmodified_since`` to the second
        (``x-amz-copy-source-if-unmodified-since``; Ceph RGW's ``x-amz-copy-if-
        unmodified-since``): a node that renewed it meanwhile, or a writer that replaced
        it, makes the copy fail, so ``metadata`` always describes the bytes it lands
        beside. Callers renew only objects modified in an earlier second than the one
        ``unmodified_since`` was read in (a second is the condition's precision). Tags are
        copied where the store keeps them on such a copy (AWS, MinIO, moto); Ceph RGW
        drops them: see :meth:`put_tags`. Returns the new Last-Modified, or None when
        the object is gone or was modified since (then nothing was changed). A store
        that cannot renew raises ``NotImplementedError``.
        """
        raise NotImplementedError(f"{self.name} cannot renew objects")

    def get_tags(self, key: str) -> dict[str, str] | None:
        """The object's tags; None where the store keeps no tags (a directory)."""
        return None

    def put_tags(self, key: str, tags: Mapping[str, str]) -> None:  # noqa: B027
        """Set the object's tags (nothing to do where the store keeps none)."""

    def versioning(self) -> str | None:
        """The bucket's versioning status (``"Enabled"``, ``"Suspended"``), None when it
        was never turned on (or the store has none, a directory)."""
        return None

    def list_versions(self, prefix: str) -> Iterator[ObjectVersion]:
        """Every version and delete marker under ``prefix`` (none where unversioned)."""
        return iter(())

    def delete_versions(self, items: Sequence[tuple[str, str]]) -> dict[str, str]:
        """Delete ``(key, version_id)`` pairs for good; ``{"key version": reason}`` of
        failures."""
        return {f"{k} {v}": "the store keeps no versions" for k, v in items}

    def delete_if_unchanged(
        self, items: Sequence[tuple[str, str | None]]
    ) -> tuple[dict[str, str], set[str]]:
        """Delete ``(key, etag)`` pairs, each only while its ETag is still ``etag``.

        Returns ``(failed, gone)``: ``{key: reason}`` of deletes that failed, and the keys
        the store says were no longer there (or no longer the object seen), which this
        call therefore did not free. Stores that do not check delete conditions delete
        unconditionally and report nothing gone (the default here).
        """
        return self.delete_many([key for key, _ in items]), set()

    def list_multipart_uploads(self, prefix: str) -> Iterator[MultipartUpload]:
        """Incomplete multipart uploads under ``prefix`` (none for a directory)."""
        return iter(())

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:  # noqa: B027
        """Abort an incomplete multipart upload (nothing to do for a directory)."""

    def quiesce(self, timeout: float) -> bool:
        """Wait until no request of this store holds a caller's buffer any more; False
        if ``timeout`` seconds pass first. A transport that runs requests on threads of
        its own may let go of a request's callbacks (and the buffers they reach) a little
        after it reported the request finished: a caller about to unmap its memory (vLLM
        at shutdown) waits here first."""
        return True

    def close(self) -> None:  # noqa: B027
        """Release connections."""
