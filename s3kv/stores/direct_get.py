"""Block GETs that the kernel reads straight into the caller's buffer.

Why: awscrt hands a GET's body to Python as a ``bytes`` copy of its part buffer (itself
a copy of its socket buffer), and s3kv then copies it into the caller's row: three
copies of every byte in user space, all on awscrt's event-loop threads. vLLM's
object-store tier makes one. Here a worker thread sends a signed GET on a kept-alive
connection and reads the body with ``recv_into`` into the row itself (with
``MSG_WAITALL`` over plain HTTP: one system call per few MiB). Over TLS the socket is
read in large pieces into OpenSSL's memory BIO and decrypted from there into the row
(:class:`_Link`): an ``SSLSocket`` would make two system calls and a GIL round trip per
16 KiB record. The thread waits in the kernel, without the GIL.

A block may be read as several ranged parts at once, each on its own connection
(:meth:`DirectGets.plan`): on a link where one connection is slow (S3 serves a GET
stream at a fraction of a host's bandwidth) a few blocks then still fill every
connection. A part's answer must be S3's (an ETag, no web page), of the block's size
(``Content-Length``, or ``Content-Range`` for a part), and every part of a block must
carry one ETag, else the object changed while it was read.

Timeouts: connect within ``connect_timeout_seconds``; then no read or send may wait more
than ``read_timeout_seconds`` without progress (``SO_RCVTIMEO``/``SO_SNDTIMEO`` on plain
sockets, the socket timeout under TLS). Cancelling a block shuts its connections down,
which ends their reads at once; its ``done`` runs only after every part's thread has
left the buffer, so nothing lands there afterwards.
"""

from __future__ import annotations

import queue
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest

from s3kv.errors import S3KVError, SizeMismatchError, StoreError, TransferCancelledError
from s3kv.errors import TransientStoreError as Transient
from s3kv.settings import S3Settings
from s3kv.stores.base import Cancel, ObjectInfo
from s3kv.stores.crt_request import Answer, translate_status
from s3kv.stores.endpoint import DataEndpoint
from s3kv.stores.errors import no_answer

GetDone = Callable[[ObjectInfo | None, BaseException | None], None]

MIN_PART_BYTES = 4 * 1024 * 1024
"""A block is split into ranged parts of at least this size (Ceph RGW stores objects in
4 MiB stripes; AWS's guidance for ranged GETs is 8-16 MiB parts)."""
MAX_HEAD_BYTES = 64 * 1024
"""An answer's status line and headers; an error body is read up to this size too."""
_WAITALL_BYTES = 4 * 1024 * 1024
"""Bytes one ``recv_into(MSG_WAITALL)`` may wait for (each call must see progress
within the read timeout; a slow link at 1 MiB/s still brings 4 MiB in 4 s)."""
_TLS_READ_BYTES = 512 * 1024
"""Ciphertext read from the socket at once over TLS (what a fast link has queued)."""


class DirectGets:
    """Ranged GETs into callers' buffers on ``connections`` worker threads."""

    def __init__(
        self,
        endpoint: DataEndpoint,
        credentials: Any,
        settings: S3Settings,
        *,
        connections: int,
    ) -> None:
        parts = urlsplit(endpoint.url)
        default_port = 443 if endpoint.tls else 80
        self._address = (parts.hostname or endpoint.hostname, parts.port or default_port)
        self._endpoint = endpoint
        self._credentials = credentials
        self._settings = settings
        self.connections = max(1, connections)
        self._tls: ssl.SSLContext | None = None
        if endpoint.tls:
            context = ssl.create_default_context(
                cafile=str(settings.ca_bundle) if settings.ca_bundle is not None else None
            )
            if not settings.verify_tls:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self._tls = context
        self._queue: queue.SimpleQueue[_Part | None] = queue.SimpleQueue()
        self._idle: list[_Link] = []
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._closed = False

    # -- what callers see ----------------------------------------------------------------

    def plan(self, count: int, size: int, window: int) -> tuple[int, int]:
        """(parts per block, blocks in flight) for ``count`` blocks of ``size`` bytes:
        enough parts that the job fills every connection, none under
        :data:`MIN_PART_BYTES`; as many blocks in flight as fill the connections."""
        parts = -(-self.connections // max(1, count))
        parts = max(1, min(parts, size // MIN_PART_BYTES))
        return parts, max(window, -(-self.connections // parts))

    def submit(
        self, key: str, where: str, buffer: memoryview, done: GetDone, *, parts: int = 1
    ) -> Cancel:
        """Read ``key`` (``where`` names it in messages) into ``buffer``, which must be
        exactly its size, as ``parts`` ranged parts; ``done(info, error)`` runs once, on
        a worker thread, after every part left the buffer. Returns the cancel."""
        size = len(buffer)
        block = _Block(key, where, buffer, done)
        count = max(1, min(parts, size // MIN_PART_BYTES or 1))
        step = -(-size // count)
        bounds = [(i, min(size, i + step)) for i in range(0, size, step)] if count > 1 else []
        block.expect(len(bounds) or 1)
        self._start_workers()
        if not bounds:
            self._queue.put(_Part(block, 0, size, ranged=False))
        for start, end in bounds:
            self._queue.put(_Part(block, start, end, ranged=True))
        return block.cancel

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            workers = len(self._workers)
        for _ in range(workers):
            self._queue.put(None)
        for link in idle:
            link.close()

    # -- workers ---------------------------------------------------------------------------

    def _start_workers(self) -> None:
        if len(self._workers) >= self.connections:
            return
        with self._lock:
            while len(self._workers) < self.connections and not self._closed:
                worker = threading.Thread(
                    target=self._work, name=f"s3kv-get-{len(self._workers)}", daemon=True
                )
                self._workers.append(worker)
                worker.start()

    def _work(self) -> None:
        while True:
            part = self._queue.get()
            if part is None:
                return
            block = part.block
            try:
                if block.cancelled:
                    raise TransferCancelledError(f"GET {block.where}: cancelled")
                info = self._fetch(part)
            except BaseException as exc:  # reported, never lost: the block must finish
                block.part_failed(_mapped(exc, block.where, self._endpoint.url, self._settings))
            else:
                block.part_done(part, info)

    # -- one part --------------------------------------------------------------------------

    def _fetch(self, part: _Part) -> ObjectInfo:
        for fresh_only in (False, True):
            link, reused = self._checkout(fresh_only)
            part.block.watch(link.sock)
            keep = False
            try:
                info, keep = self._exchange(link, part)
                return info
            except _Stale:
                if part.block.cancelled:
                    raise TransferCancelledError(f"GET {part.block.where}: cancelled") from None
                if not reused or fresh_only:
                    raise Transient(
                        f"GET {part.block.where}: the connection closed before an answer"
                    ) from None
            finally:
                part.block.unwatch(link.sock)
                self._checkin(link, keep and not part.block.cancelled)
        raise AssertionError("unreachable")

    def _exchange(self, link: _Link, part: _Part) -> tuple[ObjectInfo, bool]:
        block = part.block
        try:
            link.send(self._request(block.key, part))
            status, headers, rest = _read_head(link)
        except (ConnectionError, _Stale):
            raise _Stale() from None
        if status >= 300:
            body = _read_error_body(link, headers, rest)
            raise translate_status(status, body, headers, "GET", block.where)
        answer = Answer(block.key)
        answer.read(status, headers)
        problem = answer.foreign(block.where, self._endpoint.url)
        if problem is not None:
            raise problem
        length = _content_length(headers)
        if part.ranged:
            if status != 206:
                raise StoreError(
                    f"GET {block.where}: {self._endpoint.url} answered {status} to a ranged "
                    "GET (it ignores Range); such a store needs whole-block reads"
                )
            if answer.size != len(block.buffer):
                raise block.mismatch(answer.size)
            if length != part.end - part.start:
                raise StoreError(f"GET {block.where}: a ranged part of the wrong length")
        elif length != len(block.buffer):
            raise block.mismatch(length)  # nothing of it read: the connection is dropped
        view = block.buffer[part.start : part.end]
        _read_body(link, view, rest, block=block)
        return answer.info(), _keep_alive(headers)

    def _request(self, key: str, part: _Part) -> bytes:
        endpoint = self._endpoint
        path = f"{endpoint.path}/{quote(key, safe='/~')}"
        headers = {"Host": endpoint.host}
        if part.ranged:
            headers["Range"] = f"bytes={part.start}-{part.end - 1}"
        scheme = "https" if endpoint.tls else "http"
        request = AWSRequest(method="GET", url=f"{scheme}://{endpoint.host}{path}", headers=headers)
        frozen = self._credentials.get_frozen_credentials()
        S3SigV4Auth(frozen, "s3", endpoint.region).add_auth(request)
        lines = [f"GET {path} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in request.headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    # -- connections -----------------------------------------------------------------------

    def _checkout(self, fresh_only: bool) -> tuple[_Link, bool]:
        if not fresh_only:
            with self._lock:
                if self._idle:
                    return self._idle.pop(), True
        s = self._settings
        try:
            sock = socket.create_connection(self._address, timeout=s.connect_timeout_seconds)
        except TimeoutError:
            raise no_answer("GET", self._endpoint.url, self._endpoint.url,
                            s.connect_timeout_seconds) from None
        except OSError as exc:
            raise Transient(f"GET: cannot connect to {self._endpoint.url}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is None:
            # Blocking reads (MSG_WAITALL needs them), each bounded by the kernel.
            sock.settimeout(None)
            whole, frac = divmod(s.read_timeout_seconds, 1.0)
            limit = struct.pack("ll", int(whole), int(frac * 1_000_000))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
            return _Link(sock), False
        sock.settimeout(s.read_timeout_seconds)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self._tls.wrap_bio(incoming, outgoing, server_hostname=self._endpoint.hostname)
        link = _Link(sock, tls, incoming, outgoing)
        try:
            link.handshake()
        except ssl.SSLError as exc:
            link.close()
            raise StoreError(
                f"GET: TLS with {self._endpoint.url} failed ({exc}); pass the server's CA "
                "with --ca-bundle/S3KV_CA_BUNDLE (or --no-verify-tls for testing)"
            ) from None
        except (OSError, _Stale) as exc:
            link.close()
            raise Transient(f"GET: TLS with {self._endpoint.url} failed: {exc}") from None
        return link, False

    def _checkin(self, link: _Link, keep: bool) -> None:
        if keep:
            with self._lock:
                if not self._closed and len(self._idle) < self.connections:
                    self._idle.append(link)
                    return
        link.close()


class _Link:
    """A connection: a plain socket, or a socket and OpenSSL's memory BIOs (TLS).

    Over TLS, ciphertext is read from the socket in pieces of up to
    :data:`_TLS_READ_BYTES` into the incoming BIO and decrypted from there: one system
    call per piece instead of two per 16 KiB record, and no GIL hand-off per record.
    """

    __slots__ = ("_in", "_out", "_raw", "sock", "tls")

    def __init__(
        self,
        sock: socket.socket,
        tls: ssl.SSLObject | None = None,
        incoming: ssl.MemoryBIO | None = None,
        outgoing: ssl.MemoryBIO | None = None,
    ) -> None:
        self.sock, self.tls, self._in, self._out = sock, tls, incoming, outgoing
        self._raw = bytearray(_TLS_READ_BYTES if tls is not None else 0)

    def handshake(self) -> None:
        assert self.tls is not None
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                self._pump()
        self._flush()

    def send(self, data: bytes) -> None:
        if self.tls is None:
            self.sock.sendall(data)
            return
        self.tls.write(data)
        self._flush()

    def recv(self, size: int) -> bytes:
        """Up to ``size`` bytes (at least one); raises :class:`_Stale` at the end."""
        if self.tls is None:
            data = self.sock.recv(size)
            if not data:
                raise _Stale()
            return data
        while True:
            try:
                return self.tls.read(size)
            except ssl.SSLWantReadError:
                self._pump()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                raise _Stale() from None

    def read_into(self, view: memoryview) -> int:
        """Bytes read into ``view`` (0 at the end of the stream)."""
        if self.tls is None:
            return self.sock.recv_into(view, min(len(view), _WAITALL_BYTES), socket.MSG_WAITALL)
        while True:
            try:
                got: int = self.tls.read(len(view), view)  # type: ignore[assignment]
                return got
            except ssl.SSLWantReadError:
                try:
                    self._pump()
                except _Stale:
                    return 0
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return 0

    def _pump(self) -> None:
        got = self.sock.recv_into(self._raw)
        if not got:
            raise _Stale()
        self._in.write(memoryview(self._raw)[:got])  # type: ignore[union-attr]

    def _flush(self) -> None:
        pending = self._out.read() if self._out is not None else b""
        if pending:
            self.sock.sendall(pending)

    def close(self) -> None:
        _close(self.sock)


class _Stale(Exception):
    """A kept-alive connection the server closed meanwhile: try a fresh one."""


class _Part:
    __slots__ = ("block", "end", "ranged", "start")

    def __init__(self, block: _Block, start: int, end: int, *, ranged: bool) -> None:
        self.block, self.start, self.end, self.ranged = block, start, end, ranged


class _Block:
    """One block's parts: their sockets (for cancel), their answers, one ``done``."""

    def __init__(self, key: str, where: str, buffer: memoryview, done: GetDone) -> None:
        self.key, self.where, self.buffer, self._done = key, where, buffer, done
        self.cancelled = False
        self._lock = threading.Lock()
        self._left = 0
        self._sockets: set[socket.socket] = set()
        self._infos: list[ObjectInfo] = []
        self._error: BaseException | None = None

    def expect(self, parts: int) -> None:
        self._left = parts

    def mismatch(self, size: int) -> SizeMismatchError:
        return SizeMismatchError(
            f"GET {self.where}: object is {size} bytes, expected {len(self.buffer)} "
            "(a truncated or foreign object, or a buffer of the wrong size)"
        )

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)
            cancelled = self.cancelled
        if cancelled:
            _shut(sock)

    def unwatch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)

    def cancel(self) -> None:
        self._stop(None)

    def _stop(self, error: BaseException | None) -> None:
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
            if error is not None and self._error is None:
                self._error = error
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)  # its thread's read ends at once; the part reports, then done runs

    def part_done(self, part: _Part, info: ObjectInfo) -> None:
        with self._lock:
            self._infos.append(info)
        self._settle()

    def part_failed(self, error: BaseException) -> None:
        if not isinstance(error, TransferCancelledError):
            self._stop(error)  # the first real failure is the block's; the rest stop
        self._settle()

    def _settle(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left:
                return
            error, infos, cancelled = self._error, self._infos, self.cancelled
        if error is None and cancelled:
            error = TransferCancelledError(f"GET {self.where}: cancelled")
        if error is None and len({i.etag for i in infos}) > 1:
            error = Transient(f"GET {self.where}: the object changed while its parts were read")
        self._done(None if error is not None else infos[0], error)


def _read_head(link: _Link) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers and the bytes after them, read until the blank line."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            raise StoreError("an answer whose headers exceed 64 KiB: not an S3 endpoint")
        data += link.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split(" ", 2)[1])
    except (IndexError, ValueError):
        raise StoreError(f"an answer that is not HTTP: {lines[0][:60]!r}") from None
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    return status, headers, rest


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def _content_length(headers: list[tuple[str, str]]) -> int:
    value = _header(headers, "content-length")
    if value is None or not value.isdigit():
        raise StoreError("an answer without a Content-Length (a streamed body): not an S3 GET")
    return int(value)


def _keep_alive(headers: list[tuple[str, str]]) -> bool:
    return (_header(headers, "connection") or "").lower() != "close"


def _read_error_body(link: _Link, headers: list[tuple[str, str]], rest: bytes) -> bytes:
    value = _header(headers, "content-length")
    want = min(int(value), MAX_HEAD_BYTES) if value and value.isdigit() else len(rest)
    body = rest
    try:
        while len(body) < want:
            body += link.recv(want - len(body))
    except _Stale:
        pass
    return body[:want]


def _read_body(link: _Link, view: memoryview, rest: bytes, *, block: _Block) -> None:
    total = len(view)
    pos = min(len(rest), total)
    view[:pos] = rest[:pos]
    while pos < total:
        got = link.read_into(view[pos:])
        if not got:
            if block.cancelled:
                raise TransferCancelledError(f"GET {block.where}: cancelled")
            raise Transient(f"GET {block.where}: connection closed after {pos} of {total} bytes")
        pos += got


def _mapped(exc: BaseException, where: str, endpoint: str, settings: S3Settings) -> BaseException:
    if isinstance(exc, S3KVError):
        return exc
    if isinstance(exc, (TimeoutError, BlockingIOError, socket.timeout)):
        return no_answer("GET", where, endpoint, settings.read_timeout_seconds)
    if isinstance(exc, (ConnectionError, OSError)):
        return Transient(f"GET {where}: {endpoint}: connection failed: {exc}")
    return exc


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass

