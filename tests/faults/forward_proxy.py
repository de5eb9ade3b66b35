"""An HTTP forward proxy on 127.0.0.1, what ``HTTP_PROXY``/``HTTPS_PROXY`` name.

Plain HTTP comes as absolute-form requests (``GET http://host:port/path HTTP/1.1``), each
forwarded on a fresh upstream connection; TLS comes as ``CONNECT host:port``, answered
200 and tunnelled byte for byte. ``hosts`` maps the names clients ask for to where they
really are, so an endpoint whose name resolves nowhere (``s3.via-proxy.test``) is
reachable only through this proxy. Every request and tunnel is recorded in ``seen`` as
``(method, target)``.

With ``tls`` (a server context) the proxy itself speaks TLS, what an ``https://`` proxy
URL names: a client must trust the proxy's certificate before it may send ``CONNECT``.
Each handshake the client broke off (it did not trust the certificate) is counted in
``refused``.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Mapping
from typing import BinaryIO
from urllib.parse import urlsplit


class ForwardProxy:
    def __init__(
        self, hosts: Mapping[str, tuple[str, int]], *, tls: ssl.SSLContext | None = None
    ) -> None:
        self.hosts = dict(hosts)
        self.tls = tls
        self.seen: list[tuple[str, str]] = []
        self.refused = 0
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.closed.set()
        self.sock.close()
        with self.lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def methods(self) -> set[str]:
        with self.lock:
            return {m for m, _ in self.seen}

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _where(self, authority: str) -> tuple[str, int]:
        if authority in self.hosts:
            return self.hosts[authority]
        host, _, port = authority.rpartition(":")
        return host, int(port)

    def _serve(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:  # ssl.SSLError among them
                with self.lock:
                    self.refused += 1
                conn.close()
                return
            with self.lock:
                self._conns.append(conn)
        reader = conn.makefile("rb")
        try:
            while not self.closed.is_set():
                line = reader.readline()
                if not line:
                    return
                method, target, _ = line.decode("latin-1").split(" ", 2)
                headers = _headers(reader)
                with self.lock:
                    self.seen.append((method, target))
                if method == "CONNECT":
                    self._tunnel(conn, reader, target)
                    return
                self._forward(conn, reader, method, target, headers)
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def _tunnel(self, conn: socket.socket, reader: BinaryIO, target: str) -> None:
        up = socket.create_connection(self._where(target))
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pending = reader.peek(0) if hasattr(reader, "peek") else b""  # type: ignore[attr-defined]
        if pending:
            up.sendall(reader.read(len(pending)))

        def pipe(a: socket.socket, b: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := a.recv(65536):
                    b.sendall(data)
            with contextlib.suppress(OSError):
                # the plain socket's own shutdown: SSLSocket.shutdown would drop its TLS
                # state under the other direction's recv
                socket.socket.shutdown(b, socket.SHUT_WR)

        other = threading.Thread(target=pipe, args=(up, conn), daemon=True)
        other.start()
        pipe(conn, up)
        other.join()
        up.close()

    def _forward(self, conn: socket.socket, reader: BinaryIO, method: str, target: str,
                 headers: list[tuple[str, str]]) -> None:
        parts = urlsplit(target)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
        body = reader.read(length) if length else b""
        skip = {"connection", "proxy-connection", "keep-alive", "content-length", "host"}
        host, port = self._where(parts.netloc)
        # moto's server reads a bucket from a Host it does not know: name it plainly
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}",
                 *(f"{k}: {v}" for k, v in headers if k.lower() not in skip)]
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        with socket.create_connection((host, port)) as up:
            up.sendall("\r\n".join(lines).encode("latin-1") + body)
            answer = b""
            while data := up.recv(65536):
                answer += data
        head, _, rest = answer.partition(b"\r\n\r\n")
        kept = [h for h in head.split(b"\r\n")
                if not h.lower().startswith((b"connection:", b"keep-alive:"))]
        conn.sendall(b"\r\n".join([*kept, b"Connection: keep-alive"]) + b"\r\n\r\n" + rest)


def _headers(reader: BinaryIO) -> list[tuple[str, str]]:
    out = []
    while True:
        line = reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return out
        name, _, value = line.decode("latin-1").partition(":")
        out.append((name.strip(), value.strip()))
