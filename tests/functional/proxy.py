"""A fault-injecting HTTP proxy on 127.0.0.1, in front of moto's server.

Works on the wire, so it tests any client (awscrt's native data path included): per
connection it reads one request head and, by ``rule(method, path, attempt)``, forwards
it, answers ``503 SlowDown`` / ``500``, resets the connection, or cuts the response body
midway. moto answers ``Connection: close``, so one request per connection suffices.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

Rule = Callable[[str, str, int], "str | None"]


class FaultProxy:
    def __init__(self, upstream: str, rule: Rule, *, cut_after: int = 1000) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rule = rule
        self.cut_after = cut_after
        self.attempts: dict[tuple[str, str], int] = {}
        self.injected: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.closing(conn):
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            method, path = line.split(" ")[:2]
            path = path.split("?", 1)[0]
            with self.lock:
                n = self.attempts.get((method, path), 0) + 1
                self.attempts[(method, path)] = n
            fault = self.rule(method, path, n)
            if fault is not None:
                with self.lock:
                    self.injected.append((method, path, fault))
            if fault == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            if fault in ("503", "500"):
                self._drain_body(conn, head)
                code = "SlowDown" if fault == "503" else "InternalError"
                body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
                conn.sendall(
                    f"HTTP/1.1 {fault} X\r\nContent-Type: application/xml\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
                )
                return
            self._forward(conn, head, cut=fault == "cut")

    @staticmethod
    def _drain_body(conn: socket.socket, head: bytes) -> None:
        header, _, rest = head.partition(b"\r\n\r\n")
        length = 0
        for h in header.split(b"\r\n")[1:]:
            name, _, value = h.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        left = length - len(rest)
        conn.settimeout(5)
        while left > 0:
            chunk = conn.recv(min(left, 65536))
            if not chunk:
                return
            left -= len(chunk)

    def _forward(self, conn: socket.socket, head: bytes, *, cut: bool) -> None:
        up = socket.create_connection(self.upstream)
        with contextlib.closing(up):
            up.sendall(head)

            def client_to_upstream() -> None:
                with contextlib.suppress(OSError):
                    while data := conn.recv(65536):
                        up.sendall(data)

            threading.Thread(target=client_to_upstream, daemon=True).start()
            sent = 0
            with contextlib.suppress(OSError):
                while data := up.recv(65536):
                    if cut and sent + len(data) > self.cut_after:
                        conn.sendall(data[: self.cut_after - sent])
                        break
                    conn.sendall(data)
                    sent += len(data)
            # wakes the thread blocked in conn.recv (close alone would not)
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
