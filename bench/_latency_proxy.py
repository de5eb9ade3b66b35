"""A TCP proxy on 127.0.0.1 that adds a fixed latency to every HTTP request.

Like tests/functional/proxy.py it works on the wire, so every client (boto3, awscrt,
NIXL's AWS C++ SDK) pays the same: each request head is held ``delay_seconds`` before it
is forwarded (about S3's first-byte latency in region), then bytes flow untouched.
Keep-alive connections work: request heads are found by ``Content-Length`` (a chunked
request body ends the parsing on that connection; lookups send none).

It runs in its own process (asyncio), so it never competes with the measured client for
the GIL; requests are counted per method in shared memory, with the most requests held
at once (the client's concurrency, since the delay dominates a request's time).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import socket
from typing import Any
from urllib.parse import urlsplit

METHODS = ("HEAD", "GET", "PUT", "POST", "DELETE", "OTHER")


class LatencyProxy:
    """``with LatencyProxy(upstream, delay_seconds=0.015) as p: ... p.url ... p.counts()``"""

    def __init__(self, upstream: str, *, delay_seconds: float = 0.015) -> None:
        parts = urlsplit(upstream)
        self.delay_seconds = delay_seconds
        # spawn, not fork: a fork of a process that runs awscrt or NIXL threads crashes
        # when the child tears their copied state down.
        ctx = multiprocessing.get_context("spawn")
        self._counts = ctx.Array("q", len(METHODS))
        self._peak = ctx.Value("q", 0)
        port = ctx.Value("i", 0)
        ready = ctx.Event()
        self._proc = ctx.Process(
            target=_serve,
            args=(
                parts.hostname or "127.0.0.1",
                parts.port or 80,
                delay_seconds,
                self._counts,
                self._peak,
                port,
                ready,
            ),
            daemon=True,
        )
        self._proc.start()
        if not ready.wait(60):
            self.close()
            raise RuntimeError("latency proxy did not start within 60 s")
        self.url = f"http://127.0.0.1:{port.value}"

    def counts(self) -> dict[str, int]:
        return dict(zip(METHODS, self._counts[:]))

    def peak_in_flight(self) -> int:
        return int(self._peak.value)

    def reset_peak(self) -> None:
        self._peak.value = 0

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join(10)

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(
    host: str,
    upstream_port: int,
    delay: float,
    counts: Any,  # multiprocessing.Array("q", ...)
    peak: Any,  # multiprocessing.Value("q")
    port: Any,  # multiprocessing.Value("i"): set once listening
    ready: Any,  # multiprocessing.Event
) -> None:
    held = 0

    async def requests(reader: asyncio.StreamReader, up: asyncio.StreamWriter) -> None:
        nonlocal held
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
                break
            lines = head.split(b"\r\n")
            method = lines[0].split(b" ", 1)[0].decode("latin-1")
            slot = METHODS.index(method) if method in METHODS else len(METHODS) - 1
            with counts.get_lock():
                counts[slot] += 1
            length, chunked = 0, False
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value.strip())
                elif name == b"transfer-encoding" and b"chunked" in value.lower():
                    chunked = True
            held += 1
            if held > peak.value:
                peak.value = held
            await asyncio.sleep(delay)
            held -= 1
            up.write(head)
            if chunked:  # no framing to follow: pass the rest through as is
                while data := await reader.read(65536):
                    up.write(data)
                    await up.drain()
                break
            while length > 0:
                data = await reader.read(min(length, 65536))
                if not data:
                    break
                up.write(data)
                length -= len(data)
            await up.drain()
        with contextlib.suppress(OSError):
            up.write_eof()

    async def responses(up: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await up.read(65536):
                writer.write(data)
                await writer.drain()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, upstream_port)
        except OSError:
            writer.close()
            return
        forward = asyncio.ensure_future(requests(reader, up_writer))
        await responses(up_reader, writer)
        forward.cancel()
        for w in (writer, up_writer):
            with contextlib.suppress(OSError):
                w.close()

    def quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # A connection the client dropped mid-request leaves its task unreferenced.
        if not str(context.get("message", "")).startswith("Task was destroyed"):
            loop.default_exception_handler(context)

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(quiet)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        port.value = sock.getsockname()[1]
        ready.set()
        server = await asyncio.start_server(handle, sock=sock, limit=1 << 20, backlog=1024)
        async with server:
            await server.serve_forever()

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # no asyncio teardown noise
    asyncio.run(main())
