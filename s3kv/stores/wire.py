"""HTTP/1.1 to an S3 endpoint on kept-alive connections: s3kv's direct data path's wire.

:class:`Link` is one connection. Over plain HTTP its socket blocks (``MSG_WAITALL``
needs that) and the kernel bounds every read and send (``SO_RCVTIMEO``/``SO_SNDTIMEO``).
Over TLS, ciphertext is read from the socket in pieces of up to :data:`TLS_READ_BYTES`
into OpenSSL's memory BIO and decrypted from there: an ``SSLSocket`` would make two
system calls and a GIL hand-off per 16 KiB record. :class:`Links` opens, lends and takes
back links (a LIFO of idle ones). :func:`signed_request` builds a request's bytes,
signed with botocore's SigV4 signer (unsigned payload: s3kv's CRC32C headers cover the
bytes); :func:`read_head` reads an answer's status and headers.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from typing import Any
from urllib.parse import quote, urlsplit

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest

from s3kv.errors import S3KVError, StoreError
from s3kv.errors import TransientStoreError as Transient
from s3kv.settings import S3Settings
from s3kv.stores.endpoint import DataEndpoint
from s3kv.stores.errors import no_answer, tls_failed

MAX_HEAD_BYTES = 64 * 1024
"""An answer's status line and headers; an error body is read up to this size too."""
WAITALL_BYTES = 4 * 1024 * 1024
"""Bytes one ``recv_into(MSG_WAITALL)`` may wait for (each call must see progress
within the read timeout; a slow link at 1 MiB/s still brings 4 MiB in 4 s)."""
TLS_READ_BYTES = 512 * 1024
"""Ciphertext read from the socket at once over TLS (what a fast link has queued)."""
TLS_WRITE_BYTES = 1024 * 1024
"""Plaintext encrypted and sent at once over TLS."""

Headers = list[tuple[str, str]]


class Stale(Exception):
    """The connection ended before an answer (a kept-alive one the server closed)."""


class _Unsigned:
    """Request context that makes botocore's S3 signer send ``UNSIGNED-PAYLOAD``."""

    s3 = {"payload_signing_enabled": False}  # noqa: RUF012 (read only)


class Link:
    """One connection: a plain socket, or a socket and OpenSSL's memory BIOs (TLS)."""

    __slots__ = ("_in", "_out", "_raw", "sock", "tls")

    def __init__(
        self,
        sock: socket.socket,
        tls: ssl.SSLObject | None = None,
        incoming: ssl.MemoryBIO | None = None,
        outgoing: ssl.MemoryBIO | None = None,
    ) -> None:
        self.sock, self.tls, self._in, self._out = sock, tls, incoming, outgoing
        self._raw = bytearray(TLS_READ_BYTES if tls is not None else 0)

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

    def send(self, data: bytes | memoryview) -> None:
        if self.tls is None:
            self.sock.sendall(data)
            return
        view = memoryview(data)
        for start in range(0, len(view), TLS_WRITE_BYTES):
            self.tls.write(view[start : start + TLS_WRITE_BYTES])
            self._flush()

    def recv(self, size: int) -> bytes:
        """Up to ``size`` bytes (at least one); :class:`Stale` at the end of the stream."""
        if self.tls is None:
            data = self.sock.recv(size)
            if not data:
                raise Stale()
            return data
        while True:
            try:
                return self.tls.read(size)
            except ssl.SSLWantReadError:
                self._pump()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                raise Stale() from None

    def read_into(self, view: memoryview) -> int:
        """Bytes read into ``view``, 0 at the end of the stream."""
        if self.tls is None:
            return self.sock.recv_into(view, min(len(view), WAITALL_BYTES), socket.MSG_WAITALL)
        while True:
            try:
                got: int = self.tls.read(len(view), view)  # type: ignore[assignment]
                return got
            except ssl.SSLWantReadError:
                try:
                    self._pump()
                except Stale:
                    return 0
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return 0

    def _pump(self) -> None:
        got = self.sock.recv_into(self._raw)
        if not got:
            raise Stale()
        assert self._in is not None
        self._in.write(memoryview(self._raw)[:got])

    def _flush(self) -> None:
        pending = self._out.read() if self._out is not None else b""
        if pending:
            self.sock.sendall(pending)

    def shutdown(self) -> None:
        """End the connection's reads and writes at once (from any thread)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Links:
    """Connections to one endpoint: opened on demand, kept alive, at most ``size`` idle."""

    def __init__(self, endpoint: DataEndpoint, settings: S3Settings, size: int) -> None:
        parts = urlsplit(endpoint.url)
        default_port = 443 if endpoint.tls else 80
        self._address = (parts.hostname or endpoint.hostname, parts.port or default_port)
        self._endpoint, self._settings, self._size = endpoint, settings, size
        self._tls: ssl.SSLContext | None = None
        if endpoint.tls:
            ca = str(settings.ca_bundle) if settings.ca_bundle is not None else None
            context = ssl.create_default_context(cafile=ca)
            if not settings.verify_tls:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self._tls = context
        self._idle: list[Link] = []
        self._lock = threading.Lock()
        self._closed = False

    def checkout(self, *, fresh: bool = False) -> tuple[Link, bool]:
        """A link, and whether it was kept alive from an earlier request."""
        if not fresh:
            with self._lock:
                if self._idle:
                    return self._idle.pop(), True
        return self._open(), False

    def checkin(self, link: Link, *, keep: bool) -> None:
        if keep:
            with self._lock:
                if not self._closed and len(self._idle) < self._size:
                    self._idle.append(link)
                    return
        link.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for link in idle:
            link.close()

    def _open(self) -> Link:
        s, url = self._settings, self._endpoint.url
        try:
            sock = socket.create_connection(self._address, timeout=s.connect_timeout_seconds)
        except TimeoutError:
            raise no_answer("connect", url, url, s.connect_timeout_seconds) from None
        except OSError as exc:
            raise Transient(f"cannot connect to {url}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is None:
            sock.settimeout(None)
            whole, frac = divmod(s.read_timeout_seconds, 1.0)
            limit = struct.pack("ll", int(whole), int(frac * 1_000_000))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
            return Link(sock)
        sock.settimeout(s.read_timeout_seconds)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self._tls.wrap_bio(incoming, outgoing, server_hostname=self._endpoint.hostname)
        link = Link(sock, tls, incoming, outgoing)
        try:
            link.handshake()
        except ssl.SSLError as exc:
            link.close()
            raise tls_failed(f"TLS with {url}", url, str(exc)) from None
        except (OSError, Stale) as exc:
            link.close()
            raise Transient(f"TLS with {url} failed: {exc}") from None
        return link


def signed_request(
    method: str,
    endpoint: DataEndpoint,
    key: str,
    credentials: Any,
    headers: dict[str, str],
) -> bytes:
    """The request's head: ``method`` of ``key`` at ``endpoint``, signed (SigV4, an
    unsigned payload), with ``headers`` (``Host`` is set here)."""
    path = f"{endpoint.path}/{quote(key, safe='/~')}"
    scheme = "https" if endpoint.tls else "http"
    request = AWSRequest(
        method=method, url=f"{scheme}://{endpoint.host}{path}",
        headers={"Host": endpoint.host, **headers},
    )
    request.context["client_config"] = _Unsigned()
    S3SigV4Auth(credentials.get_frozen_credentials(), "s3", endpoint.region).add_auth(request)
    lines = [f"{method} {path} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in request.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def read_head(link: Link) -> tuple[int, Headers, bytes]:
    """Status, headers (names lower-cased) and the bytes after them."""
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


def header(headers: Headers, name: str) -> str | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def content_length(headers: Headers) -> int:
    value = header(headers, "content-length")
    if value is None or not value.isdigit():
        raise StoreError("an answer without a Content-Length (a streamed body): not S3's")
    return int(value)


def keep_alive(headers: Headers) -> bool:
    return (header(headers, "connection") or "").lower() != "close"


def read_small_body(link: Link, headers: Headers, rest: bytes) -> bytes:
    """An error's (or a PUT answer's) body, up to :data:`MAX_HEAD_BYTES`."""
    value = header(headers, "content-length")
    want = min(int(value), MAX_HEAD_BYTES) if value and value.isdigit() else len(rest)
    body = rest
    try:
        while len(body) < want:
            body += link.recv(want - len(body))
    except Stale:
        pass
    return body[:want]


def mapped(exc: BaseException, method: str, where: str, endpoint: str,
           settings: S3Settings) -> BaseException:
    """The s3kv error for what a request on a link raised."""
    if isinstance(exc, S3KVError):
        return exc
    if isinstance(exc, (TimeoutError, BlockingIOError)):
        return no_answer(method, where, endpoint, settings.read_timeout_seconds)
    if isinstance(exc, (Stale, OSError)):
        return Transient(f"{method} {where}: {endpoint}: connection failed: {exc or 'closed'}")
    return exc
