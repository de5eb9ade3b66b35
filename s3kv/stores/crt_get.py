"""One block's GET on awscrt (:mod:`.crt`): its ranged requests, read into the caller's
buffer, and the one answer they make together.

Each part is one HTTP request, a ranged GET that awscrt reads into one pooled buffer and
hands over once; it carries a token of its own (:func:`.echoes.request_token`). Before any
byte of its body lands, its answer must be S3's (an ETag, no web page), the answer to this
request (the token echoed), of the block's size (``Content-Range``'s total) and of
exactly the range asked. Every part of a block must carry one ETag, else the object
changed while it was read. When a part fails, the block's other parts are stopped;
``done`` runs once, after every part left the buffer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from awscrt import s3

from s3kv.errors import S3KVError, TransferCancelledError, TransientStoreError
from s3kv.retry import Pacer
from s3kv.settings import S3Settings
from s3kv.stores.base import ObjectInfo
from s3kv.stores.crt_call import Answer, Call
from s3kv.stores.echoes import TOKEN_PARAMETER, Echoes, request_token
from s3kv.stores.memory import address_of, copy_to
from s3kv.stores.network import Network
from s3kv.stores.rules import (
    RangeNotSatisfiable,
    attempt_seconds,
    cut_short,
    oversized,
    size_mismatch,
)


class Sender(Protocol):
    """What a block's parts need of the store that sends them (:class:`.crt.CrtS3Store`)."""

    settings: S3Settings
    network: Network
    echoes: Echoes
    pacer: Pacer

    def start(
        self, method: str, key: str, call: Call, *, query: str = "",
        headers: list[tuple[str, str]] | None = None, body: memoryview | None = None,
        on_headers: Callable[..., None] | None = None,
        on_body: Callable[..., None] | None = None, kind: Any = ...,
        operation: str | None = None, part_bytes: int | None = None,
        recv_filepath: str | None = None,
    ) -> None: ...

    def failure(self, exc: BaseException | None, call: Call, method: str, where: str,
                nbytes: int = 0) -> BaseException: ...


MIN_PART_BYTES = 4 * 1024 * 1024
"""A block is split into ranged parts of at least this size (Ceph RGW stores objects in
4 MiB stripes; AWS's guidance for ranged GETs is 8-16 MiB parts)."""


def plan(count: int, size: int, window: int, connections: int, max_request: int) -> tuple[int, int]:
    """(parts per block, blocks in flight) for a load of ``count`` blocks of ``size``
    bytes on ``connections``: enough parts that the job fills every connection, none
    under :data:`MIN_PART_BYTES` nor over ``max_request``; as many blocks in flight as
    fill the connections."""
    parts = -(-connections // max(1, count))
    parts = max(1, min(parts, size // MIN_PART_BYTES))
    parts = max(parts, -(-size // max_request))
    return parts, max(window, -(-connections // parts))


class BlockGet:
    """One block's parts: their calls (for cancel), their answers, one ``done``."""

    def __init__(
        self,
        store: Sender,
        key: str,
        where: str,
        buffer: memoryview,
        done: Callable[[ObjectInfo | None, BaseException | None], None],
    ) -> None:
        self.store, self.key, self.where, self.buffer = store, key, where, buffer
        self._done = done
        self.address = address_of(buffer)
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._left = 0
        self._infos: list[ObjectInfo] = []
        self._error: BaseException | None = None
        self._cancelled = False

    def start(self, parts: int) -> None:
        size = len(self.buffer)
        count = max(1, min(parts, size))
        step = -(-size // count)
        ranges = [(start, min(size, start + step)) for start in range(0, size, step)]
        self._left = len(ranges)
        for start, end in ranges:
            self._part(start, end)

    def cancel(self) -> None:
        self._stop(None)

    def _stop(self, error: BaseException | None) -> None:
        with self._lock:
            if error is not None and self._error is None:
                self._error = error
            if self._cancelled:
                return
            self._cancelled = True
            calls = list(self._calls)
        for call in calls:
            call.cancel()  # each part reports, then done

    def _part(self, start: int, end: int) -> None:
        store, where, expected = self.store, self.where, len(self.buffer)
        endpoint = store.network.endpoint
        token = request_token()
        answer = Answer(self.key)
        length = end - start
        call = Call(attempt_seconds(store.settings, length))
        received = [0]
        address = self.address

        def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
            call.last = time.monotonic()
            if status_code >= 300:
                return
            try:
                answer.read_get(headers, where, endpoint, store.echoes, token, call.client,
                                start)
                if answer.size != expected:
                    raise size_mismatch(where, answer.size, expected)
                if answer.length != length:
                    raise store.echoes.foreign(TransientStoreError(
                        f"GET {where}: an answer of {answer.length} bytes to a range of "
                        f"{length}: not this request's; retried"
                    ), call.client)
            except S3KVError as problem:  # read no further
                call.stop("refused", problem)

        def on_body(chunk: bytes, offset: int, **_: Any) -> None:
            with call.gate:
                if not call.open:
                    return
                if offset < start or offset + len(chunk) > end:
                    call.open = False  # never beyond the range asked
                    call.reason, call.problem = "refused", TransientStoreError(
                        f"GET {where}: the answer held bytes outside the range asked; retried"
                    )
                    meta = call.meta
                    if meta is not None:
                        meta.cancel()
                    return
                if address is not None:
                    copy_to(address + offset, chunk)
                else:
                    self.buffer[offset : offset + len(chunk)] = chunk
                received[0] += len(chunk)
            call.last = time.monotonic()

        def report(exc: BaseException | None) -> None:
            if exc is not None or call.reason:
                err = store.failure(exc, call, "GET", where, length)
                if isinstance(err, RangeNotSatisfiable):  # a 0-byte object
                    err = size_mismatch(where, 0, expected)
                self._part_failed(err)
            elif received[0] != length:
                self._part_failed(cut_short("GET", where, received[0], length))
            else:
                self._part_done(answer.info())

        call.on_end(report)
        with self._lock:
            self._calls.append(call)
            cancelled = self._cancelled
        if cancelled:
            call.cancel()
            return
        store.start(
            "GET", self.key, call, query=f"{TOKEN_PARAMETER}={token}",
            headers=[("Range", f"bytes={start}-{end - 1}")],
            on_headers=on_headers, on_body=on_body, kind=s3.S3RequestType.GET_OBJECT,
            part_bytes=max(length, 4096),
        )

    def _part_done(self, info: ObjectInfo) -> None:
        with self._lock:
            self._infos.append(info)
        self._settle()

    def _part_failed(self, error: BaseException) -> None:
        if not isinstance(error, TransferCancelledError):
            self._stop(error)  # the first real failure is the block's; the rest stop
        self._settle()

    def _settle(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left:
                return
            error, infos, cancelled = self._error, self._infos, self._cancelled
            self._calls = []
        if error is None and cancelled:
            error = TransferCancelledError(f"GET {self.where}: cancelled")
        if error is None and len({i.etag for i in infos}) > 1:
            error = TransientStoreError(
                f"GET {self.where}: the object changed while its parts were read; retried"
            )
        self._done(None if error is not None else infos[0], error)


SmallDone = Callable[[bytes, Answer, BaseException | None], None]
"""``done(body, answer, error)`` of :func:`submit_small_get`: once, when the request ended."""


def submit_small_get(store: Sender, key: str, where: str, max_bytes: int | None,
                     done: SmallDone, *, look: bool = False, path: str | None = None) -> Call:
    """Start one GET of ``key``, bound to its request (its token echoed, the range asked
    answered); ``done(body, answer, error)`` runs once, from another thread, when it
    ended. At most ``max_bytes`` bytes (None: the whole object) are asked, and a larger
    object is refused from the headers; ``look``: its first ``max_bytes`` bytes whatever
    its size (a presence look); ``path``: awscrt writes the body into that file (opened
    before this returns; no bytes given). ``error`` is what it met: the store's error
    (:class:`.rules.RangeNotSatisfiable` for a 0-byte object), or the refusal. Returns
    the request's :class:`Call` (``cancel()`` stops it)."""
    answer = Answer(key)
    token = request_token()
    call = Call(attempt_seconds(store.settings, max_bytes or 0))
    chunks: list[tuple[int, bytes]] = []

    def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
        call.last = time.monotonic()
        if status_code >= 300:
            return
        try:
            answer.read_get(headers, where, store.network.endpoint, store.echoes, token,
                            call.client, 0 if max_bytes else None)
            if max_bytes is not None and answer.size > max_bytes and not look:
                raise oversized(where, answer.size, max_bytes)
        except S3KVError as problem:  # read no further
            call.stop("refused", problem)

    def on_body(chunk: bytes, offset: int, **_: Any) -> None:
        with call.gate:
            if call.open:
                chunks.append((offset, chunk))
        call.last = time.monotonic()

    def report(exc: BaseException | None) -> None:
        if exc is not None or call.reason:
            done(b"", answer, store.failure(exc, call, "GET", where, max_bytes or 0))
            return
        done(b"".join(chunk for _, chunk in sorted(chunks, key=lambda c: c[0])), answer, None)

    call.on_end(report)
    store.pacer.check("GET", where)
    headers = [("Range", f"bytes=0-{max_bytes - 1}")] if max_bytes else []
    store.start(
        "GET", key, call, query=f"{TOKEN_PARAMETER}={token}",
        headers=headers, on_headers=on_headers, on_body=None if path else on_body,
        kind=s3.S3RequestType.GET_OBJECT, recv_filepath=path,
    )
    return call


def small_get(store: Sender, key: str, where: str, max_bytes: int | None, *,
              look: bool = False, path: str | None = None) -> tuple[bytes, Answer]:
    """:func:`submit_small_get` run to its end: its body and its answer, or its error
    raised (Ctrl-C stops the request)."""
    ended = threading.Event()
    outcome: list[tuple[bytes, Answer, BaseException | None]] = []

    def done(body: bytes, answer: Answer, error: BaseException | None) -> None:
        outcome.append((body, answer, error))
        ended.set()

    call = submit_small_get(store, key, where, max_bytes, done, look=look, path=path)
    try:
        ended.wait()
    except BaseException:
        call.cancel()  # Ctrl-C: the request stops at once
        raise
    body, answer, error = outcome[0]
    if error is not None:
        raise error
    return body, answer
