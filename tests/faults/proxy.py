"""A fault-injecting HTTP/1.1 proxy on 127.0.0.1, in front of moto's server.

It works on the wire, so it tests any client (awscrt's data path and botocore alike),
and keeps client connections alive as a real store does (awscrt reuses connections;
moto's server answers ``Connection: close``, so each request gets its own upstream
connection and the client side stays open). Per request, ``rule(request)`` picks a fault
by name (None: forward as is):

``503`` / ``500`` / ``429`` / ``501``
    an S3 error answer (SlowDown, InternalError, TooManyRequests, NotImplemented), with
    ``Retry-After`` when the proxy has ``retry_after``; the request is not forwarded.
``reset``
    reset the connection before any answer (nothing forwarded).
``reset-after``
    forward (the store keeps the write), then reset: an answer lost after the fact.
``reset-mid`` / ``short``
    forward, send the headers and ``cut_after`` body bytes, then reset / close cleanly
    (``short``: Content-Length kept, the body cut short).
``flip``
    forward, flip one byte of the body (at ``cut_after``, or the last byte).
``stall``
    read the request and never answer. ``stall-headers``: forward, send the headers,
    then nothing.
``html`` / ``empty``
    answer 200 with a web page / with an empty body (nothing forwarded).
``huge``
    a GET answered with the object's headers but a body of :data:`HUGE` bytes of zeros
    (ranges honoured), streamed until the client hangs up: an oversized object.
``slow``
    forward, then hold the answer ``delay`` seconds: a slow store whose writes land
    before the client hears of them (a client killed meanwhile leaves nothing in flight).
``drop-inm``
    forward without ``If-None-Match`` (a store that ignores it).
``bad-echo``
    forward, and answer with a CRC32C checksum that is not the one sent (moto echoes
    none; AWS and MinIO echo what they stored).
``list-repeat-token`` / ``list-no-token`` / ``list-dup`` / ``list-unordered``
    forward a listing and break its page: the next token repeats the request's own,
    a truncated page without a token, a key listed twice, two keys swapped.

``stale``
    the desynchronised connection: first the answer this connection carried last (a
    well-formed answer to another request), then this request's own (``delay`` seconds
    later, when given: a client that took the first answer is done before it). ``extra``: this
    request's answer, then at once an unsolicited copy of it. ``replay``: first the last 2xx
    answer the proxy sent on any connection (another object's), then this request's own:
    a stale success where the connection carried none. ``head-answer``: first what a HEAD
    of the object answers (the GET's own status line and headers, 200, the object's whole
    size as Content-Length, no body, no echo of the request's parameters), then the
    request's own answer: a stale HEAD's answer read as a GET's.
``trickle``
    forward, send the headers, then the body one byte every ``delay`` seconds.
``chunked`` / ``garbage`` / ``cl-short``
    forward, and send the body chunked / followed by bytes of no answer / under a
    Content-Length one byte short of it (the last byte left over on the connection).
``skew`` / ``region`` / ``expired``
    S3's answers to a clock 20 minutes fast (403 RequestTimeTooSkewed, with the store's
    Date), to a bucket in another region (301 PermanentRedirect, ``x-amz-bucket-region:
    eu-west-1``; no body for a HEAD) and to expired credentials (400 ExpiredToken).
``fake-put``
    answer a PUT 200 with an ETag without forwarding it or echoing its checksum (a
    middlebox faking answers).
``wrong-key``
    Ceph RGW's answer to a GET of an object encrypted with a customer key (SSE-C) that
    carries another key or none (400 InvalidArgument): moto keeps no key, so
    :class:`CustomerKeys` plays the store's side of SSE-C as a rule.

``rename_host`` forwards with the upstream's own ``Host`` (moto's server takes an unknown
host name for a bucket; a store that checks signatures must get the client's).
``echo`` makes every forwarded PUT's answer echo its ``x-amz-checksum-crc32c``, as AWS
and MinIO do (moto and Ceph RGW 16 echo none).

``max_keys`` makes moto page its listings (the query is rewritten; moto checks no
signature). ``strip_prefix`` plays a gateway mounted under a path (``/gw``): requests
must carry it (else 404, counted in ``stray``), and it is removed before forwarding.
Every request is recorded (method, path, query, Host header, fault) in ``requests``.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, BinaryIO
from urllib.parse import parse_qsl, urlencode, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    attempt: int = 1
    """How many times this method and path (query aside) have been seen, this one included."""
    fault: str | None = None
    at: float = field(default_factory=time.monotonic)
    sent: int = 0
    """Body bytes the proxy got onto the client's connection."""
    replayed: bool = False
    """``stale``: another request's answer went out first (the connection had carried one)."""

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    @property
    def host(self) -> str:
        return self.header("host") or ""

    @property
    def is_block(self) -> bool:
        return self.path.endswith(".bin")

    @property
    def is_listing(self) -> bool:
        return self.method == "GET" and "list-type=2" in self.query


Rule = Callable[[Request], "str | None"]
ERRORS = {
    "503": (503, "SlowDown"),
    "500": (500, "InternalError"),
    "429": (429, "TooManyRequests"),
    "501": (501, "NotImplemented"),
}
HUGE = 512 * 1024 * 1024
HTML = b"<!DOCTYPE html><html><head><title>Console</title></head><body>Sign in</body></html>"



def once_per_block(fault: str, method: str) -> Rule:
    """A rule that answers the first ``method`` request of each block key with ``fault``
    and forwards the rest: a fault that a retry gets past."""
    hit: set[str] = set()
    lock = threading.Lock()

    def rule(request: Request) -> str | None:
        if not (request.is_block and request.method == method):
            return None
        with lock:
            if request.path in hit:
                return None
            hit.add(request.path)
        return fault

    return rule


class CustomerKeys:
    """SSE-C as a store keeps it, as a rule: the key (its MD5) an object was written with
    is remembered, and a GET of it with another key or none is answered ``wrong-key``
    (moto's server stores SSE-C objects in the clear and serves them to any request)."""

    HEADER = "x-amz-server-side-encryption-customer-key-MD5"

    def __init__(self) -> None:
        self.written: dict[str, str] = {}
        self.refused: list[Request] = []
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> str | None:
        sent = request.header(self.HEADER)
        if request.method == "PUT" and not request.query and sent:
            with self._lock:  # create-only: the first write's key is the object's
                self.written.setdefault(request.path, sent)
            return None
        if request.method == "GET" and not request.is_listing:
            kept = self.written.get(request.path)
            if kept is not None and sent != kept:
                with self._lock:
                    self.refused.append(request)
                return "wrong-key"
        return None


def slow_puts(request: Request) -> str | None:
    """Every PUT ``slow`` (with the proxy's ``delay``): a push that is certainly still
    running when a test interrupts it, and whose blocks land before it hears of them."""
    return "slow" if request.method == "PUT" else None


def slow_gets(request: Request) -> str | None:
    """Every block GET ``slow``: a pull that is certainly still running when a test stops
    it (listings answer at once)."""
    return "slow" if request.method == "GET" and not request.is_listing else None

class FaultProxy:
    def __init__(
        self,
        upstream: str,
        rule: Rule | None = None,
        *,
        cut_after: int = 1000,
        retry_after: float | None = None,
        max_keys: int | None = None,
        strip_prefix: str = "",
        delay: float = 0.0,
        tls: ssl.SSLContext | None = None,
        echo: bool = False,
        rename_host: bool = False,
    ) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rule = rule or (lambda request: None)
        self.cut_after = cut_after
        self.retry_after = retry_after
        self.max_keys = max_keys
        self.strip_prefix = strip_prefix
        self.delay = delay
        self.tls = tls
        self.echo = echo
        self.rename_host = rename_host
        self.requests: list[Request] = []
        self.stray: list[Request] = []
        self.counts: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.connections: list[socket.socket] = []
        self.last_ok = b""
        """The last 2xx answer sent on any connection (``replay``)."""
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}{strip_prefix}"
        threading.Thread(target=self._accept, daemon=True).start()

    # -- what happened ------------------------------------------------------------------

    def injected(self, fault: str | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.fault and (fault is None or r.fault == fault)]

    def seen(self, method: str | None = None, *, blocks: bool = False) -> list[Request]:
        with self.lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and (not blocks or r.is_block)
            ]

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        self.closed.set()
        self.sock.close()
        with self.lock:
            conns, self.connections = self.connections, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    # -- one client connection, many requests ---------------------------------------------

    def _serve(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:
                conn.close()
                return
            with self.lock:
                self.connections.append(conn)
        reader = conn.makefile("rb")
        sent = _Recorder(conn)
        try:
            while not self.closed.is_set():
                request = self._read_request(sent, reader)
                if request is None or not self._answer(sent, request):
                    return
                sent.answered()
                if sent.last.startswith(b"HTTP/1.1 2"):
                    with self.lock:
                        self.last_ok = sent.last
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                reader.close()
                conn.close()

    def _read_request(self, conn: Any, reader: BinaryIO) -> Request | None:
        line = reader.readline()
        if not line:
            return None
        method, target, _ = line.decode("latin-1").split(" ", 2)
        headers = _read_headers(reader)
        path, _, query = target.partition("?")
        request = Request(method, path, query, headers)
        if (request.header("expect") or "").lower() == "100-continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.headers = [(k, v) for k, v in headers if k.lower() != "expect"]
        request.body = _read_body(reader, request.headers, method=method, response=False)
        with self.lock:
            n = self.counts.get((method, path), 0) + 1
            self.counts[(method, path)] = n
        request.attempt = n
        return request

    def _answer(self, conn: Any, request: Request) -> bool:
        """Answer one request; False when the connection must end."""
        if self.strip_prefix:
            if not request.path.startswith(self.strip_prefix + "/"):
                with self.lock:
                    self.stray.append(request)
                xml = [("Content-Type", "application/xml")]
                self._send(conn, 404, xml, _error("NoSuchGateway"))
                return True
            request.path = request.path[len(self.strip_prefix) :]
        fault = self.rule(request)
        request.fault = fault
        with self.lock:
            self.requests.append(request)
        if fault in ERRORS:
            status, code = ERRORS[fault]
            headers = [("Content-Type", "application/xml")]
            if self.retry_after is not None:
                headers.append(("Retry-After", f"{self.retry_after:g}"))
            self._send(conn, status, headers, _error(code))
            return True
        if fault == "reset":
            _reset(conn)
            return False
        if fault == "stall":
            self.closed.wait()
            return False
        if fault == "html":
            self._send(conn, 200, [("Content-Type", "text/html; charset=utf-8")], HTML)
            return True
        if fault in S3_ANSWERS:
            status, code, extra = S3_ANSWERS[fault]
            extra = [(k, formatdate(time.time() - 20 * 60, usegmt=True) if v == "20 minutes ago"
                      else v) for k, v in extra]
            body = b"" if request.method == "HEAD" else _error(code)
            headers = [("Content-Type", "application/xml"), *extra]
            conn.sendall(_head(status, headers, len(body)) + body)
            return True
        if fault == "fake-put" and request.method == "PUT":
            self._send(conn, 200, [("ETag", '"0123456789abcdef0123456789abcdef"')], b"")
            return True
        if fault == "stale" and isinstance(conn, _Recorder) and conn.last:
            conn.sendall(conn.last)
            request.replayed = True
            if self.delay and self.closed.wait(self.delay):  # the request's own, late
                return False
        if fault == "replay" and self.last_ok:
            with self.lock:
                replayed = self.last_ok
            conn.sendall(replayed)
            conn.current = bytearray()  # what this connection answered is its own answer
            request.replayed = True
        if fault == "empty":
            self._send(conn, 200, [], b"")
            return True
        status, upstream, body = self._forward(request, drop_inm=fault == "drop-inm")
        if fault == "huge":
            return self._huge(conn, request, status, upstream)
        headers = [(k, v) for k, v in upstream if k.lower() not in _HOP]
        if fault == "slow":
            time.sleep(self.delay)
        if fault == "head-answer" and status < 300:
            conn.sendall(_head_answer(headers, len(body)))
            if isinstance(conn, _Recorder):
                conn.current = bytearray()
            request.replayed = True
        if fault == "bad-echo":
            headers.append(("x-amz-checksum-crc32c", "AAAAAA=="))
        sent_crc = request.header("x-amz-checksum-crc32c")
        if self.echo and request.method == "PUT" and sent_crc and status < 300:
            headers.append(("x-amz-checksum-crc32c", sent_crc))
        if fault == "reset-after":
            _reset(conn)
            return False
        if fault and fault.startswith("list-") and request.is_listing:
            body = _break_listing(body, fault, request)
        if fault == "flip" and body:
            at = min(self.cut_after, len(body) - 1)
            body = body[:at] + bytes([body[at] ^ 0x01]) + body[at + 1 :]
        if fault in ("reset-mid", "short", "stall-headers"):
            cut = 0 if fault == "stall-headers" else min(self.cut_after, max(0, len(body) - 1))
            conn.sendall(_head(status, headers, len(body)) + body[:cut])
            if fault == "reset-mid":
                _reset(conn)
            elif fault == "stall-headers":
                self.closed.wait()
            return False
        if request.method == "HEAD":  # the object's length, and no body
            length = next((int(v) for k, v in upstream if k.lower() == "content-length"), 0)
            conn.sendall(_head(status, headers, length))
            if fault == "extra" and isinstance(conn, _Recorder) and conn.current:
                conn.sendall(bytes(conn.current))
            return True
        if fault == "trickle":
            conn.sendall(_head(status, headers, len(body)))
            for at in range(len(body)):
                if self.closed.wait(self.delay):
                    return False
                conn.sendall(body[at : at + 1])
                request.sent += 1
            return True
        if fault == "chunked":
            conn.sendall(_head(status, [*headers, ("Transfer-Encoding", "chunked")], None))
            for at in range(0, len(body), 100_000):
                piece = body[at : at + 100_000]
                conn.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            conn.sendall(b"0\r\n\r\n")
            return True
        if fault == "cl-short" and body:
            conn.sendall(_head(status, headers, len(body) - 1) + body)
            return True
        conn.sendall(_head(status, headers, len(body)))
        self._body(conn, request, body)
        if fault == "garbage":
            conn.sendall(b"\x00garbage that is no answer\r\n\r\n")
        if fault == "extra" and isinstance(conn, _Recorder) and conn.current:
            conn.sendall(bytes(conn.current))
        return True

    def _body(self, conn: Any, request: Request, body: bytes) -> None:
        view = memoryview(body)
        for at in range(0, len(view), 65536):
            conn.sendall(view[at : at + 65536])
            request.sent += len(view[at : at + 65536])

    def _huge(
        self, conn: Any, request: Request, status: int, upstream: list[tuple[str, str]]
    ) -> bool:
        if status >= 300:
            conn.sendall(_head(status, [(k, v) for k, v in upstream if k.lower() not in _HOP], 0))
            return True
        skip = (*_HOP, "content-range")
        headers = [(k, v) for k, v in upstream if k.lower() not in skip]
        first, last, code = 0, HUGE - 1, 200
        spec = request.header("range")
        if spec and spec.startswith("bytes="):
            a, _, b = spec[6:].partition("-")
            first, last, code = int(a), min(HUGE - 1, int(b) if b else HUGE - 1), 206
            headers.append(("Content-Range", f"bytes {first}-{last}/{HUGE}"))
        conn.sendall(_head(code, headers, last - first + 1))
        zeros = bytes(65536)
        left = last - first + 1
        while left > 0 and not self.closed.is_set():
            chunk = zeros[: min(left, len(zeros))]
            conn.sendall(chunk)
            request.sent += len(chunk)
            left -= len(chunk)
        return True

    def _send(
        self, conn: Any, status: int, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        conn.sendall(_head(status, headers, len(body)) + body)

    def _forward(
        self, request: Request, *, drop_inm: bool
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        query = request.query
        if self.max_keys is not None and request.is_listing:
            pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "max-keys"]
            query = urlencode([*pairs, ("max-keys", str(self.max_keys))])
        target = request.path + (f"?{query}" if query else "")
        skip = {"connection", "content-length", "transfer-encoding", "keep-alive"}
        if drop_inm:
            skip.add("if-none-match")
        lines = [f"{request.method} {target} HTTP/1.1"]
        if self.rename_host:  # moto's server reads a bucket from a Host it does not know
            skip.add("host")
            lines.append(f"Host: {self.upstream[0]}:{self.upstream[1]}")
        lines += [f"{k}: {v}" for k, v in request.headers if k.lower() not in skip]
        lines += [f"Content-Length: {len(request.body)}", "Connection: close", "", ""]
        with socket.create_connection(self.upstream) as up:
            up.sendall("\r\n".join(lines).encode("latin-1") + request.body)
            reader = up.makefile("rb")
            status = int(reader.readline().split(b" ", 2)[1])
            headers = _read_headers(reader)
            body = _read_body(reader, headers, method=request.method, response=True, status=status)
        return status, headers, body


_HOP = ("connection", "content-length", "transfer-encoding", "keep-alive")

S3_ANSWERS: dict[str, tuple[int, str, list[tuple[str, str]]]] = {
    "skew": (403, "RequestTimeTooSkewed", [("Date", "20 minutes ago")]),
    "region": (301, "PermanentRedirect", [("x-amz-bucket-region", "eu-west-1")]),
    "expired": (400, "ExpiredToken", []),
    "precondition": (412, "PreconditionFailed", []),
    "wrong-key": (400, "InvalidArgument", []),
}
"""Faults that are S3's own error answers, with the headers S3 sends along."""


class _Recorder:
    """A client connection that remembers the bytes of the answer it carried last."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.current = bytearray()
        self.last = b""

    def sendall(self, data: bytes | memoryview) -> None:
        self.conn.sendall(data)
        if len(self.current) < 64 * 1024 * 1024:
            self.current += data

    def answered(self) -> None:
        self.last, self.current = bytes(self.current), bytearray()

    def setsockopt(self, *args: Any) -> None:
        self.conn.setsockopt(*args)

    def close(self) -> None:
        self.conn.close()


def _read_headers(reader: BinaryIO) -> list[tuple[str, str]]:
    headers = []
    while True:
        line = reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return headers
        name, _, value = line.decode("latin-1").partition(":")
        headers.append((name.strip(), value.strip()))


def _read_body(
    reader: BinaryIO,
    headers: list[tuple[str, str]],
    *,
    method: str,
    response: bool,
    status: int = 200,
) -> bytes:
    if response and (method == "HEAD" or status in (204, 304) or 100 <= status < 200):
        return b""
    values = {k.lower(): v for k, v in headers}
    if values.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while True:
            size = int(reader.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                _read_headers(reader)  # trailers
                return out
            out += reader.read(size)
            reader.readline()
    if "content-length" in values:
        return reader.read(int(values["content-length"]))
    return reader.read() if response else b""


def _head(status: int, headers: list[tuple[str, str]], length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in headers)]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines += ["Connection: keep-alive", "", ""]
    return "\r\n".join(lines).encode("latin-1")


def _head_answer(headers: list[tuple[str, str]], length: int) -> bytes:
    """What a HEAD of the object a GET answered gets: 200, its headers without what the
    GET's parameters and range put there, its whole size as Content-Length, no body."""
    size = length
    for k, v in headers:
        if k.lower() == "content-range":
            size = int(v.rpartition("/")[2])
    skip = ("content-range", "cache-control", "content-length")
    return _head(200, [(k, v) for k, v in headers if k.lower() not in skip], size)


MESSAGES = {
    "InvalidArgument": "The calculated MD5 hash of the key did not match the hash that was "
    "provided.",  # Ceph RGW 16's, to a GET with another customer key
}


def _error(code: str) -> bytes:
    message = MESSAGES.get(code, "injected")
    return f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()


def _reset(conn: Any) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


_CONTENTS = re.compile(rb"<Contents>.*?</Contents>", re.S)
_TOKEN = re.compile(rb"<NextContinuationToken>(.*?)</NextContinuationToken>", re.S)


def _break_listing(body: bytes, fault: str, request: Request) -> bytes:
    if fault == "list-repeat-token":
        own = dict(parse_qsl(request.query)).get("continuation-token")
        if own is not None:
            token = f"<NextContinuationToken>{own}</NextContinuationToken>".encode()
            body = _TOKEN.sub(token, body)
    elif fault == "list-no-token":
        body = _TOKEN.sub(b"", body)
    elif fault in ("list-dup", "list-unordered"):
        items = _CONTENTS.findall(body)
        if len(items) >= 2:
            start = body.index(items[0])
            end = body.index(items[-1]) + len(items[-1])
            items = [*items, items[-1]] if fault == "list-dup" else [items[1], items[0], *items[2:]]
            body = body[:start] + b"".join(items) + body[end:]
    return body
