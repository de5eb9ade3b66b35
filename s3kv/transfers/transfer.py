"""What the uploader and downloader share: a location, a namespace, a store, a pool."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from s3kv.errors import (
    AccessDeniedError,
    ClosedError,
    CustomerKeyError,
    InvalidInputError,
    InvalidKeyError,
    ManifestError,
    ObjectNotFoundError,
    S3KVError,
)
from s3kv.naming.keys import KeyMapper, KeyStyle, make_offload_key
from s3kv.naming.location import Location, parse_location
from s3kv.naming.namespace import Namespace
from s3kv.settings import S3Settings
from s3kv.stores import Store, open_store
from s3kv.transfers.stored_manifest import read_capped

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

BlockId: TypeAlias = "bytes | tuple[bytes, int]"
"""A vLLM OffloadKey, or ``(block_hash, group_idx)``."""

BlockIdT = TypeVar("BlockIdT", bound=BlockId)
"""A mapping's key type: ``dict[bytes, ...]`` is no ``Mapping[BlockId, ...]`` (keys are
invariant), so methods taking a mapping are generic in it."""


class ArrayLike(Protocol):
    """A numpy array (or row). numpy's stubs give arrays ``__buffer__`` only from Python
    3.12, so before that ``Buffer`` alone would refuse them; they export this instead."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...


BlockBuffer: TypeAlias = "Buffer | ArrayLike"
"""A block's bytes, in place: bytes, bytearray, memoryview, a numpy row, a contiguous
buffer of any format (read as bytes). Loads need it writable (checked at run time)."""

TransferT = TypeVar("TransferT", bound="Transfer")

BLOCK_TAGS = {"s3kv-object": "block"}
"""Tags on every block object (a lifecycle rule expires on them; manifests have none)."""


class Transfer:
    """Base of :class:`s3kv.Uploader` and :class:`s3kv.Downloader`."""

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
    ) -> None:
        if not isinstance(namespace, Namespace):
            raise InvalidInputError(
                f"namespace must be an s3kv.Namespace; got {type(namespace).__name__}"
            )
        self.location = location if isinstance(location, Location) else parse_location(location)
        self.namespace = namespace
        self.settings = settings if settings is not None else S3Settings.resolve()
        self.keys = KeyMapper(namespace, prefix=self.location.prefix, style=style)
        self._owns_store = store is None
        self.store = store if store is not None else open_store(self.location, self.settings)
        self.concurrency = concurrency or self.settings.concurrency
        # A pool given is shared (the vLLM tier's, one per role for every tenant) and
        # outlives this transfer; one made here is its own.
        self._shared_executor = executor
        self._executor: Executor | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _check_open(self) -> None:
        """Refuse work after :meth:`close` (its store and pool are gone)."""
        if self._closed:
            raise ClosedError(
                f"this {type(self).__name__} for {self.location.url} is closed; open a new one"
            )

    @property
    def executor(self) -> Executor:
        self._check_open()
        if self._shared_executor is not None:
            return self._shared_executor
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.concurrency, thread_name_prefix=f"s3kv-{type(self).__name__.lower()}"
                )
            return self._executor

    def url_for(self, key: str) -> str:
        return self.location.url_for(key)

    def read_manifest(self) -> Namespace | None:
        """The namespace the stored ``config.json`` describes; None if there is none."""
        key = self.keys.config_key()
        try:
            data = read_capped(self.store, key, self.settings)
        except ObjectNotFoundError:
            return None
        except CustomerKeyError:
            raise
        except AccessDeniedError:
            # A policy whose ListBucket is held to a prefix gets 403 for a missing key on
            # Ceph RGW (a tenant's role, terraform/modules/aws-tenant): a listing of
            # exactly the key tells a missing manifest from a forbidden one.
            if not self._listed(key):
                return None
            raise
        try:
            return Namespace.from_manifest(data, rank=self.namespace.rank)
        except ManifestError as exc:
            raise ManifestError(f"{self.url_for(key)}: {exc}") from None

    def _listed(self, key: str) -> bool:
        """Whether a listing names ``key`` (True too when the listing is refused)."""
        try:
            return any(info.key == key for info in self.store.list(key))
        except S3KVError:
            return True

    def close(self, *, wait: bool = True) -> None:
        """Stop the pool (waiting for running blocks unless ``wait=False``); later calls
        raise :class:`ClosedError`. Closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=not wait)
        if self._owns_store:
            self.store.close()

    def __enter__(self: TransferT) -> TransferT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def offload_key_of(block: object) -> bytes:
    """Normalise an OffloadKey or ``(hash, group)`` pair to an OffloadKey."""
    if type(block) is bytes:
        return block
    if isinstance(block, tuple) and len(block) == 2:
        return make_offload_key(block[0], block[1])
    if isinstance(block, (bytearray, memoryview)):
        return bytes(block)
    raise InvalidKeyError(
        f"a block key must be a vLLM OffloadKey (bytes) or (block_hash, group_idx); got "
        f"{type(block).__name__}"
    )


def refuse_duplicates(keys: Iterable[bytes]) -> None:
    """One key twice in one call is refused: it would be sent (or loaded) twice and
    could land in two outcomes of one report."""
    seen: set[bytes] = set()
    for key in keys:
        if key in seen:
            raise InvalidInputError(
                f"block {key.hex()} is given twice in one call; pass each key once"
            )
        seen.add(key)


def pairs_of(
    items: Mapping[BlockIdT, BlockBuffer] | Iterable[tuple[BlockId, BlockBuffer]],
) -> Iterable[tuple[BlockId, BlockBuffer]]:
    if isinstance(items, Mapping):
        return items.items()
    return items


_PLAIN_FORMATS = frozenset("bBchHiIlLqQnNefd?")
"""Buffer formats whose memory is plain numbers (struct's single-item codes): what a KV
row can be. ``O`` (Python objects: pointers) and records are not."""


def as_bytes_view(buffer: object, key: bytes, *, writable: bool) -> memoryview:
    """A flat byte view of a caller's buffer, without copying it.

    The one buffer check, made before any request: a buffer that is not a buffer, not
    contiguous (a strided view), read-only where bytes must land, empty, or of a format
    that cannot be read as bytes raises :class:`InvalidInputError` here, so no transport
    callback ever meets it.
    """
    try:
        view = memoryview(buffer)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidInputError(
            f"block {key.hex()}: {type(buffer).__name__} is not a buffer; pass bytes, "
            "bytearray, memoryview or a numpy array row (torch: tensor.numpy())"
        ) from None
    except (ValueError, BufferError) as exc:  # a closed mmap, a released view
        raise InvalidInputError(
            f"block {key.hex()}: its {type(buffer).__name__} cannot be read ({exc}); pass "
            "a buffer that is open for as long as the transfer runs"
        ) from None
    if view.format.lstrip("@=<>!") not in _PLAIN_FORMATS:
        raise InvalidInputError(
            f"block {key.hex()}: a buffer of format {view.format!r} holds no plain bytes "
            "(an object or structured array: its memory is pointers or records); pass a "
            "numeric array or a bytes-like object"
        )
    if writable and view.readonly:
        raise InvalidInputError(f"block {key.hex()}: the buffer to load into is read-only")
    if not view.c_contiguous:
        raise InvalidInputError(
            f"block {key.hex()}: the buffer is not contiguous (a strided view); pass a "
            "contiguous row (numpy.ascontiguousarray)"
        )
    if view.nbytes == 0:
        raise InvalidInputError(f"block {key.hex()}: the buffer is empty; no block is 0 bytes")
    if view.format == "B" and view.ndim == 1:
        return view
    try:
        return view.cast("B")
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"block {key.hex()}: a buffer of format {view.format!r} cannot be read as bytes "
            f"({exc}); pass a numpy array or bytes-like object"
        ) from None
