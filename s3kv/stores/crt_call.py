"""One awscrt request as s3kv sees it: its call, its answer and its failures.

:class:`Call` is the request in flight: when it must end (:mod:`.watchdog` cancels it
after ``connect + read`` seconds without progress, or past its deadline), and the gate of
the caller's buffer: once it is stopped or finished, no byte of it lands there.
:class:`Answer` reads what an answer's headers say (size, checksum, ETag, write token,
the echo of our request token). :func:`crt_failure` turns what awscrt raised into s3kv's
tree: an S3 error answer goes to the one table (:func:`.rules.error_for`), a connection
that failed is named with its endpoint, and through a proxy with the proxy.
"""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Callable
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from awscrt import s3
from awscrt.exceptions import AwsCrtError

from s3kv.errors import (
    AccessDeniedError,
    S3KVError,
    StoreError,
    TransferCancelledError,
    TransientStoreError,
)
from s3kv.integrity import Checksum
from s3kv.settings import display_url
from s3kv.stores.base import ObjectInfo
from s3kv.stores.echoes import Echoes
from s3kv.stores.memory import address_of, copy_from
from s3kv.stores.network import Network
from s3kv.stores.rules import (
    TIMEOUT_HINT,
    check_found,
    error_fields,
    error_for,
    not_s3,
    ranged_size,
    stale_answer,
)
from s3kv.stores.writing import META_CHECKSUM, META_WRITE_ID

# awscrt's names for a connection that opened and then never (or too slowly) answered.
_STALLED = frozenset(
    {
        "AWS_ERROR_HTTP_CHANNEL_THROUGHPUT_FAILURE",
        "AWS_IO_SOCKET_TIMEOUT",
        "AWS_ERROR_HTTP_RESPONSE_FIRST_BYTE_TIMEOUT",
        "AWS_IO_TLS_NEGOTIATION_TIMEOUT",
    }
)
_UNREACHABLE = frozenset(
    {
        "AWS_IO_SOCKET_CONNECTION_REFUSED",
        "AWS_IO_SOCKET_NO_ROUTE_TO_HOST",
        "AWS_IO_SOCKET_NETWORK_DOWN",
        "AWS_IO_DNS_INVALID_NAME",
        "AWS_IO_DNS_QUERY_FAILED",
        "AWS_IO_DNS_NO_ADDRESS_FOR_HOST",
        "AWS_ERROR_HTTP_PROXY_CONNECT_FAILED",
        "AWS_ERROR_HTTP_PROXY_STRATEGY_NTLM_CHALLENGE_TOKEN_MISSING",
        "AWS_ERROR_HTTP_PROXY_STRATEGY_TOKEN_RETRY",
    }
)

# awscrt's names for an answer that is no well-formed S3 answer (malformed framing, a
# missing header S3 always sends): a wire fault, retried.
_LOCAL_FILE = {
    "AWS_ERROR_NO_SPACE": "no space left on device; free space, then run it again (a re-run "
    "copies only what is missing)",
    "AWS_ERROR_MAX_FDS_EXCEEDED": "too many open files; raise the limit (ulimit -n) or lower "
    "--concurrency",
    "AWS_ERROR_FILE_OPEN_FAILURE": "it could not be opened",
    "AWS_ERROR_FILE_READ_FAILURE": "it could not be read",
    "AWS_ERROR_FILE_WRITE_FAILURE": "it could not be written",
    "AWS_ERROR_FILE_INVALID_PATH": "no such file or folder",
    "AWS_ERROR_INVALID_FILE_HANDLE": "it was closed meanwhile",
    "AWS_ERROR_S3_RECV_FILE_ALREADY_EXISTS": "it exists already",
    "AWS_ERROR_S3_RECV_FILE_NOT_FOUND": "no such file",
}
"""awscrt's names for a failure of the local file it reads a PUT's body from or writes a
GET's body to (``send_filepath``, ``recv_filepath``): this machine's problem, not the
store's, so never retried (a full disk stays full) and never counted against the store
(its pause, its breaker, its retry quota)."""

_MALFORMED = {
    "AWS_ERROR_S3_MISSING_CONTENT_RANGE_HEADER": "a ranged answer without Content-Range",
    "AWS_ERROR_S3_INVALID_CONTENT_RANGE_HEADER": "a Content-Range that is not S3's",
    "AWS_ERROR_S3_MISSING_CONTENT_LENGTH_HEADER": "an answer without Content-Length",
    "AWS_ERROR_S3_INVALID_CONTENT_LENGTH_HEADER": "a Content-Length that is not a number",
    "AWS_ERROR_S3_INCORRECT_CONTENT_LENGTH": "a body of another length than announced",
    "AWS_ERROR_S3_MISSING_ETAG": "an answer without an ETag",
    "AWS_ERROR_S3_INVALID_RESPONSE_STATUS": "a status S3 does not answer with",
    "AWS_ERROR_HTTP_PROTOCOL_ERROR": "bytes that are not HTTP/1.1",
    "AWS_ERROR_HTTP_INVALID_HEADER_FIELD": "a malformed header",
    "AWS_ERROR_HTTP_INVALID_HEADER_NAME": "a malformed header",
    "AWS_ERROR_HTTP_INVALID_HEADER_VALUE": "a malformed header",
    "AWS_ERROR_HTTP_INVALID_STATUS_CODE": "a malformed status line",
    "AWS_ERROR_HTTP_CONNECTION_CLOSED": "a connection closed before the whole answer",
    "AWS_ERROR_HTTP_SERVER_CLOSED": "a connection closed before the whole answer",
    "AWS_IO_SOCKET_CLOSED": "a connection closed before the whole answer",
    "AWS_ERROR_S3_OBJECT_MODIFIED": "an object that changed while it was read",
}


class Call:
    """One awscrt request: its progress and deadline (for the :class:`Watchdog`), the gate
    of the caller's buffer, and its one report.

    Once :meth:`stop` or :meth:`finish` returned, no byte of this request moves to or
    from the caller's buffer (its callbacks copy under the gate). The request's end is
    reported once (:meth:`on_end`): when awscrt finishes it, or at once when s3kv stops
    it, since awscrt may hold a cancelled request for long (a failed TLS handshake is
    held 10-30 s by s2n's blinding delay).
    """

    __slots__ = (
        "_report",
        "client",
        "deadline",
        "file",
        "gate",
        "last",
        "meta",
        "open",
        "problem",
        "reason",
        "reported",
    )

    def __init__(self, seconds: float, allowance: float = 0.0) -> None:
        now = time.monotonic()
        self.gate = threading.Lock()
        self.open = True
        self.last = now + allowance
        self.deadline = now + seconds
        self.meta: Any = None
        self.client: Any = None  # the awscrt client (its connections) that carried it
        self.file = False  # awscrt reads its body from a file, or writes it into one
        self.reason = ""  # why it was stopped: "stalled", "cancelled" or "refused"
        self.problem: BaseException | None = None  # what a refused answer was
        self._report: Callable[[BaseException | None], None] | None = None
        self.reported = False

    def on_end(self, report: Callable[[BaseException | None], None]) -> None:
        """``report(error)`` runs once when the request ends: awscrt's error (None for
        an answer), or None when s3kv stopped it (:attr:`reason` says why)."""
        self._report = report

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
        self.end(None)

    def expire(self) -> None:
        self.stop("stalled")

    def moved(self) -> None:
        """Bytes moved (a body awscrt writes to a file reports only its progress)."""
        self.last = time.monotonic()

    def cancel(self) -> None:
        self.stop("cancelled")

    def end(self, error: BaseException | None) -> None:
        with self.gate:
            self.open = False
            if self.reported:
                return
            self.reported = True
            report, self._report = self._report, None  # no cycle through the closure
        if report is not None:
            report(error)

    def finish(self) -> None:
        """awscrt let go of the request."""
        with self.gate:
            self.open = False
        # The request holds its callbacks (and through them the caller's buffer), and
        # its future holds our completion: no cycle may keep a view of the rows alive.
        self.meta = None


class Answer:
    """What a 2xx answer's headers say about the object."""

    __slots__ = (
        "cache_control",
        "checksum",
        "content_range",
        "content_type",
        "echoed",
        "etag",
        "key",
        "last_modified",
        "length",
        "size",
        "write_id",
    )

    def __init__(self, key: str) -> None:
        self.key = key
        self.size = -1  # the object's size (Content-Range's total for a ranged answer)
        self.length = -1  # the answer's body length
        self.checksum: Checksum | None = None
        self.etag: str | None = None
        self.content_type: str | None = None
        self.cache_control: str | None = None
        self.content_range: str | None = None
        self.write_id: str | None = None
        self.last_modified: datetime | None = None
        self.echoed: str | None = None  # the checksum a PUT's answer echoes

    def read_get(self, headers: list[tuple[str, str]], where: str, endpoint: str,
                 echoes: Echoes, token: str, carrier: object, first: int | None = None) -> None:
        """A GET's 2xx headers, read and checked: S3's answer (an ETag, no web page) to
        this very request: of the range asked from byte ``first`` (None: no range was
        asked), and with the token it sent (:meth:`.echoes.Echoes.check_token`)."""
        self.read(headers)
        check_found("GET", where, endpoint, self.etag, self.content_type)
        if first is not None:
            try:
                if self.content_range is None:  # S3 answers a range it can serve with 206
                    raise stale_answer("GET", where, "a whole answer to a ranged request")
                ranged_size(where, self.content_range, self.length, first)
            except TransientStoreError as framing:
                raise echoes.foreign(framing, carrier) from None
        echoes.check_token("GET", where, endpoint, token, self.cache_control, carrier,
                           ranged=first is not None and self.content_range is not None)

    def read(self, headers: list[tuple[str, str]]) -> None:
        for name, value in headers:
            lower = name.lower()
            if lower == "content-length":
                self.length = int(value) if value.isdigit() else -1
                if self.size < 0:
                    self.size = self.length
            elif lower == "content-range":  # "bytes 0-N/total"
                self.content_range = value
                total = value.rpartition("/")[2]
                self.size = int(total) if total.isdigit() else -1
            elif lower == META_CHECKSUM:
                self.checksum = Checksum.parse(value)
            elif lower == "etag":
                self.etag = value
            elif lower == META_WRITE_ID:
                self.write_id = value
            elif lower == "content-type":
                self.content_type = value
            elif lower == "cache-control":
                self.cache_control = value
            elif lower.startswith("x-amz-checksum-") and lower != "x-amz-checksum-type":
                self.echoed = value
            elif lower == "last-modified":  # what renewal compares against (s3kv.ops.gc.renewal)
                try:
                    self.last_modified = parsedate_to_datetime(value)
                except (TypeError, ValueError):
                    pass

    def info(self) -> ObjectInfo:
        return ObjectInfo(
            key=self.key,
            size=self.size,
            last_modified=self.last_modified,
            checksum=self.checksum,
            etag=self.etag,
            write_id=self.write_id,
        )


def crt_failure(
    exc: BaseException | None,
    call: Call,
    method: str,
    where: str,
    network: Network,
    region: str,
    seconds: float,
) -> BaseException:
    """The s3kv error for a request that failed, or that s3kv stopped."""
    if call.reason == "stalled":
        return _stalled(method, where, network, seconds)
    if call.reason == "cancelled":
        return TransferCancelledError(f"{method} {where}: cancelled")
    if call.reason == "refused" and call.problem is not None:
        return call.problem
    if exc is None:  # pragma: no cover - an ended request without an error succeeded
        return StoreError(f"{method} {where}: ended without an answer")
    if isinstance(exc, s3.S3ResponseError):
        body = exc.body or b""
        fields = error_fields(body)
        return error_for(
            method,
            where,
            status=int(exc.status_code),
            code=fields.get("Code", ""),
            message=fields.get("Message", ""),
            headers=exc.headers or (),
            fields=fields,
            region=region,
        )
    if isinstance(exc, AwsCrtError):
        if exc.name == "AWS_ERROR_S3_CANCELED":
            return TransferCancelledError(f"{method} {where}: cancelled")
        if exc.name in _STALLED:
            return _stalled(method, where, network, seconds, exc.name)
        if exc.name == "AWS_ERROR_S3_REQUEST_TIME_TOO_SKEWED":  # awscrt reads the code itself
            return error_for(method, where, status=403, code="RequestTimeTooSkewed",
                             region=region)
        if exc.name in ("AWS_ERROR_S3_SLOW_DOWN", "AWS_ERROR_S3_INTERNAL_ERROR",
                        "AWS_ERROR_S3_REQUEST_TIMEOUT"):
            return error_for(method, where, status=503, region=region)
        if exc.name == "AWS_ERROR_NO_PERMISSION":
            return AccessDeniedError(f"{method} {where}: its local file: permission denied")
        if exc.name in _LOCAL_FILE:
            return StoreError(f"{method} {where}: its local file: {_LOCAL_FILE[exc.name]} "
                              f"({exc.name})")
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if call.file and exc.name == "AWS_ERROR_SYS_CALL_FAILURE" and (
            limit != resource.RLIM_INFINITY
        ):
            # What awscrt names a write refused past the file size limit (EFBIG): this
            # machine's, like a full disk; never retried, never counted against the store.
            return StoreError(
                f"{method} {where}: its local file: a write failed, and this process may "
                f"write no file past {limit:,} bytes (ulimit -f); raise that limit, then run "
                f"it again ({exc.name})"
            )
        if exc.name in _MALFORMED:
            return not_s3(method, where, network.endpoint,
                          f"{_MALFORMED[exc.name]} ({exc.name}){network.via}")
        if exc.name in _UNREACHABLE:
            return network.unreachable(method, where, exc.name)
        if exc.name.startswith(("AWS_IO_TLS", "S2N", "AWS_IO_PKI")):
            return network.tls_failed(method, where, exc.name)
        return TransientStoreError(
            f"{method} {where}: {network.shown}{network.via}: {exc.name}: {exc.message}"
        )
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return TransientStoreError(f"{method} {where}: {network.shown}{network.via}: {exc}")
    if isinstance(exc, S3KVError):
        return exc
    return StoreError(f"{method} {where}: {display_url(network.endpoint)}: {exc}")


def _stalled(
    method: str, where: str, network: Network, seconds: float, name: str = ""
) -> TransientStoreError:
    detail = f" ({name})" if name else ""
    return TransientStoreError(
        f"{method} {where}: no answer from {network.shown}{network.via} within "
        f"{seconds:.1f}s{detail}; {TIMEOUT_HINT}"
    )


class Body:
    """A PUT's body: the caller's buffer, copied into awscrt's part buffer without the
    GIL when the buffer is writable memory (:mod:`.memory`)."""

    def __init__(self, view: memoryview, call: Call) -> None:
        self.view, self.pos, self.call = view, 0, call
        self.address = address_of(view)

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self.view) - self.pos)
        if n <= 0:
            return 0
        target = memoryview(buffer).cast("B")[:n]
        source = self.view[self.pos : self.pos + n]
        with self.call.gate:  # never from the caller's buffer once the request ended
            if not self.call.open:
                raise TransferCancelledError("the request ended")
            copy_from(target, source, None if self.address is None else self.address + self.pos)
        self.pos += n
        return n

    def read(self, size: int = -1) -> bytes:  # awscrt asks for read(); it uses readinto
        end = len(self.view) if size < 0 else min(len(self.view), self.pos + size)
        data = bytes(self.view[self.pos : end])
        self.pos = end
        return data

    def seek(self, offset: int, whence: int = 0) -> int:  # awscrt rewinds for a retry
        base = (0, self.pos, len(self.view))[whence]
        self.pos = base + offset
        return self.pos
