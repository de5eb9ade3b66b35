"""One awscrt request as s3kv sees it: its call, its answer and its errors.

:class:`Call` is the request in flight: its progress for the watchdog, and the gate of
the caller's buffer (once it is stopped or finished, no byte of it lands there).
:class:`Answer` reads what the headers say (size, checksum, ETag, write token) and
checks it is an S3 answer. :func:`crt_error` turns what awscrt raised into s3kv's tree.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from awscrt import s3
from awscrt.exceptions import AwsCrtError

from s3kv.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ObjectNotFoundError,
    SizeMismatchError,
    StoreError,
    TransferCancelledError,
    TransientStoreError,
)
from s3kv.integrity import METADATA_KEY, WRITE_ID_KEY, Checksum
from s3kv.stores.answers import check_stored
from s3kv.stores.base import ObjectInfo, PutOptions
from s3kv.stores.errors import TIMEOUT_HINT, not_implemented, not_s3, retry_after

META_HEADER = f"x-amz-meta-{METADATA_KEY}"
WRITE_ID_HEADER = f"x-amz-meta-{WRITE_ID_KEY}"
CHECKSUM_HEADERS = {
    "crc32c": "x-amz-checksum-crc32c",
    "crc32": "x-amz-checksum-crc32",
    "sha256": "x-amz-checksum-sha256",
}

# awscrt's names for a connection that opened and then never (or too slowly) answered.
STALLED = frozenset(
    {
        "AWS_ERROR_HTTP_CHANNEL_THROUGHPUT_FAILURE",
        "AWS_IO_SOCKET_TIMEOUT",
        "AWS_ERROR_HTTP_RESPONSE_FIRST_BYTE_TIMEOUT",
        "AWS_ERROR_HTTP_CONNECTION_CLOSED",
        "AWS_IO_TLS_NEGOTIATION_TIMEOUT",
    }
)


class Call:
    """One awscrt request: its progress (for the :class:`Watchdog`) and the gate of the
    caller's buffer. Once :meth:`stop` or :meth:`finish` returned, no byte of this
    request lands in the buffer (``on_body`` writes under the gate)."""

    __slots__ = ("gate", "last", "meta", "open", "problem", "reason")

    def __init__(self, allowance: float = 0.0) -> None:
        self.gate = threading.Lock()
        self.open = True
        self.last = time.monotonic() + allowance
        self.meta: Any = None
        self.reason = ""  # why it was stopped: "stalled", "cancelled" or "refused"
        self.problem: BaseException | None = None  # what a refused answer was

    def started(self, meta: Any) -> None:
        self.meta = meta
        if not self.open:  # stopped before awscrt handed the request back
            meta.cancel()

    def stop(self, reason: str, problem: BaseException | None = None) -> None:
        with self.gate:
            if not self.open:
                return
            self.open = False
            self.reason, self.problem = reason, problem
            meta = self.meta
        if meta is not None:
            meta.cancel()

    def expire(self) -> None:
        self.stop("stalled")

    def cancel(self) -> None:
        self.stop("cancelled")

    def finish(self) -> None:
        with self.gate:
            self.open = False
        # The request holds its callbacks (and through them the caller's buffer), and
        # its future holds our completion: no cycle may keep a view of the rows alive.
        self.meta = None


class BodyReader(io.RawIOBase):
    """The request body: the caller's buffer, read by awscrt in chunks."""

    def __init__(self, view: memoryview) -> None:
        self.view, self.pos = view, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self.view) - self.pos)
        buffer[:n] = self.view[self.pos : self.pos + n]
        self.pos += n
        return n


class AlreadyExists(StoreError):
    """412 on a create-only PUT (internal: put returns False)."""


class EmptyObject(StoreError):
    """416 on a ranged GET: a 0-byte object (no range of it exists)."""


class Answer:
    __slots__ = (
        "checksum",
        "etag",
        "headers",
        "html",
        "key",
        "last_modified",
        "received",
        "size",
        "write_id",
        "wrong_size",
    )

    def __init__(self, key: str) -> None:
        self.key = key
        self.size = -1
        self.received = 0
        self.wrong_size = False
        self.checksum: Checksum | None = None
        self.etag: str | None = None
        self.html = False
        self.write_id: str | None = None
        self.last_modified: datetime | None = None
        self.headers: dict[str, str] = {}

    def read(self, status_code: int, headers: list[tuple[str, str]], *, keep: bool = False) -> None:
        if status_code >= 300:
            return
        for name, value in headers:
            lower = name.lower()
            if keep:
                self.headers[lower] = value
            if lower == "content-length" and self.size < 0:
                self.size = int(value)
            elif lower == "content-range":  # a ranged first part: "bytes 0-N/total"
                self.size = int(value.rsplit("/", 1)[1])
            elif lower == META_HEADER:
                self.checksum = Checksum.parse(value)
            elif lower == "etag":
                self.etag = value
            elif lower == WRITE_ID_HEADER:
                self.write_id = value
            elif lower == "content-type":
                self.html = value.lower().startswith("text/html")
            elif lower == "last-modified":  # what renewal compares against (s3kv.renewal)
                try:
                    self.last_modified = parsedate_to_datetime(value)
                except (TypeError, ValueError):
                    pass

    def foreign(self, where: str, endpoint: str, operation: str = "GET") -> StoreError | None:
        """Why a 2xx GET or HEAD answer is no S3 answer (no ETag, a web page), or None."""
        if not self.etag:
            return not_s3(operation, where, endpoint, "200 without an ETag")
        if self.html:
            return not_s3(operation, where, endpoint, "200 with an HTML page")
        return None

    def stored(self, where: str, endpoint: str, options: PutOptions) -> None:
        """A PUT's 200 must carry an ETag (and our checksum, if the store echoes one)."""
        check_stored("PUT", where, endpoint, self.etag, options, self.headers)

    def info(self) -> ObjectInfo:
        return ObjectInfo(
            key=self.key,
            size=self.size,
            last_modified=self.last_modified,
            checksum=self.checksum,
            etag=self.etag,
            write_id=self.write_id,
        )

    def size_mismatch(self, expected: int, where: str) -> SizeMismatchError:
        return SizeMismatchError(
            f"GET {where}: object is {self.size} bytes, expected {expected} "
            "(a truncated or foreign object, or a buffer of the wrong size)"
        )

    def check(self, expected: int, where: str) -> ObjectInfo:
        """The object's info once a GET into an ``expected``-byte buffer finished."""
        if self.wrong_size:
            raise self.size_mismatch(expected, where)
        if self.received != expected:
            raise TransientStoreError(
                f"GET {where}: connection closed after {self.received} of {expected} bytes"
            )
        return self.info()


def crt_error(exc: BaseException, method: str, where: str, endpoint: str) -> BaseException:
    """An s3kv error for what awscrt raised (anything else is returned as it is)."""
    if isinstance(exc, s3.S3ResponseError):
        return _translate(exc, method, where)
    if isinstance(exc, AwsCrtError):
        if exc.name in STALLED:
            return TransientStoreError(
                f"{method} {where}: no answer from {endpoint} (the connection stalled or "
                f"timed out: {exc.name}); {TIMEOUT_HINT}"
            )
        if exc.name == "AWS_ERROR_S3_CANCELED":
            return TransferCancelledError(f"{method} {where}: cancelled")
        return TransientStoreError(f"{method} {where}: {endpoint}: {exc.name}: {exc.message}")
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return TransientStoreError(f"{method} {where}: {endpoint}: {exc}")
    return exc


def _translate(exc: s3.S3ResponseError, method: str, where: str) -> StoreError:
    return translate_status(
        int(exc.status_code), exc.body or b"", exc.headers or (), method, where
    )


def translate_status(
    status: int, body: bytes, headers: Iterable[tuple[str, str]], method: str, where: str
) -> StoreError:
    """The s3kv error for an S3 answer of ``status`` (>= 300) with this error ``body``."""
    code = _error_code(body)
    if status == 412:
        return AlreadyExists(f"{method} {where}: already exists")
    if status == 416 and method == "GET":
        return EmptyObject(f"{method} {where}: the object is 0 bytes")
    if status == 404:
        if code == "NoSuchBucket":
            return BucketNotFoundError(
                f"{method} {where}: the bucket does not exist; create it first "
                "(see terraform/) or check the bucket name and --endpoint-url"
            )
        return ObjectNotFoundError(f"{method} {where}: no such object")
    if status == 403:
        return AccessDeniedError(
            f"{method} {where}: access denied ({code or 403}); check the credentials and that "
            "their policy grants this operation (terraform/ has writer and reader policies)"
        )
    if status == 501 or code == "NotImplemented":
        return not_implemented(method, where, code or f"HTTP {status}")
    if status in (409, 429) or status >= 500 or code in ("SlowDown", "RequestTimeout"):
        return TransientStoreError(
            f"{method} {where}: {code or status}: HTTP {status}",
            retry_after=retry_after(headers),
        )
    return StoreError(f"{method} {where}: {code or 'HTTP ' + str(status)}")


def _error_code(body: bytes) -> str:
    start = body.find(b"<Code>")
    end = body.find(b"</Code>")
    if start < 0 or end < start:
        return ""
    return body[start + 6 : end].decode("utf-8", "replace")
