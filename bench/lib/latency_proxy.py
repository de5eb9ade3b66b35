"""An AWS-like link on 127.0.0.1: first-byte latency and a rate cap per connection.

A TCP proxy in front of an HTTP S3 endpoint. It works on the wire, so every client
(boto3, awscrt, NIXL's AWS C++ SDK) pays the same:

* **first-byte latency**: each request head is held ``delay_seconds`` before it is
  forwarded, so the first byte of every answer comes that much later. Default
  ``S3_FIRST_BYTE_SECONDS``, 100 ms: AWS's whitepaper *Best Practices Design Patterns:
  Optimizing Amazon S3 Performance* (June 2019) puts S3's small-object latencies, and
  first-byte-out latencies for larger objects, at roughly 100-200 milliseconds; we take
  the low end. Its page on timeouts and retries puts the median of small requests
  (under 512 KB) "in the tens of milliseconds": lookups, whose HEADs are the smallest
  requests, use 15 ms in bench_lookup_latency.py.
  https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/
  (welcome.html; timeouts-and-retries-for-latency-sensitive-applications.html)
* **a rate cap per connection**, each direction, ``rate_bytes_per_second``: one S3 GET
  stream reaches roughly 85-90 MB/s (field notes, /work/shared/reference/field-notes.md;
  aws-c-s3 plans with 0.4 Gb/s per connection), which is why clients split large
  objects into ranged parts on parallel connections. Default ``S3_CONNECTION_BYTES_PER_
  SECOND``, 85 MB/s. A token bucket per connection and direction paces the bytes.

Keep-alive connections work: request heads are found by ``Content-Length`` (a chunked
request body ends the parsing on that connection; the tiers' requests send none).

Cheap by design, since it shares the CPUs with the server and the measured client: it
runs in its own process (never on the client's GIL), a thread per connection and
direction, and moves bodies with ``os.splice`` through a pipe (socket to pipe to socket,
no copy into Python) in chunks of up to 1 MiB; Python runs once per request head and
once per chunk, never per byte. Requests are counted per method in shared memory, with
the most requests held at once; ``cpu_seconds()`` is the proxy's own CPU.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import signal
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

METHODS = ("HEAD", "GET", "PUT", "POST", "DELETE", "OTHER")
S3_FIRST_BYTE_SECONDS = 0.100
S3_CONNECTION_BYTES_PER_SECOND = 85_000_000
CHUNK_BYTES = 1 << 20
"""Most bytes moved per splice (and the pipe's size): few system calls per MiB."""
PACE_SECONDS = 0.005
"""A rate-capped chunk carries this long's worth of bytes: smooth enough for 2 MiB
objects, few enough wake-ups at 85 MB/s."""


class LatencyProxy:
    """``with LatencyProxy(upstream, delay_seconds=0.1, rate_bytes_per_second=85e6) as p:``

    ``p.url`` is the proxy's endpoint; ``p.counts()`` the requests seen per method.
    ``rate_bytes_per_second=None`` leaves the bytes uncapped. ``tls=(cert, key)``: clients
    speak TLS to the proxy (as to S3), which speaks plain HTTP to the server; its own TLS
    work is in its process, not the client's.
    """

    def __init__(self, upstream: str, *, delay_seconds: float = 0.015,
                 rate_bytes_per_second: float | None = None,
                 tls: tuple[str, str] | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http":
            raise ValueError(f"the latency proxy reads HTTP request heads: {upstream} is not "
                             "http://; put it in front of the server's plain HTTP endpoint")
        if delay_seconds < 0 or (rate_bytes_per_second is not None
                                 and rate_bytes_per_second <= 0):
            raise ValueError("delay_seconds must be >= 0 and rate_bytes_per_second > 0")
        self.delay_seconds = delay_seconds
        self.rate_bytes_per_second = rate_bytes_per_second
        # spawn, not fork: a fork of a process that runs awscrt or NIXL threads crashes
        # when the child tears their copied state down.
        ctx = multiprocessing.get_context("spawn")
        self._counts = ctx.Array("q", len(METHODS))
        self._peak = ctx.Value("q", 0)
        port = ctx.Value("i", 0)
        ready = ctx.Event()
        self._proc = ctx.Process(
            target=_serve,
            args=(parts.hostname or "127.0.0.1", parts.port or 80, delay_seconds,
                  rate_bytes_per_second, self._counts, self._peak, port, ready, tls),
            daemon=True,
        )
        self._proc.start()
        if not ready.wait(60):
            self.close()
            raise RuntimeError("latency proxy did not start within 60 s")
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port.value}"

    def counts(self) -> dict[str, int]:
        return dict(zip(METHODS, self._counts[:]))

    def peak_in_flight(self) -> int:
        return int(self._peak.value)

    def reset_peak(self) -> None:
        self._peak.value = 0

    def cpu_seconds(self) -> float:
        """The proxy process's user+system CPU so far."""
        fields = Path(f"/proc/{self._proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join(10)

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Bucket:
    """Token bucket for one direction of one connection: ``take(n)`` waits for n bytes."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.chunk = int(min(CHUNK_BYTES, max(64 << 10, rate * PACE_SECONDS)))
        self.tokens = float(self.chunk)
        self.last = time.monotonic()

    def take(self, want: int) -> int:
        want = min(want, self.chunk)
        now = time.monotonic()
        self.tokens = min(float(self.chunk), self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens < want:
            time.sleep((want - self.tokens) / self.rate)
            self.tokens, self.last = float(want), time.monotonic()
        self.tokens -= want
        return want

    def refund(self, n: int) -> None:
        self.tokens += n


def _pump(src: socket.socket, dst: socket.socket, pipe: tuple[int, int],
          bucket: _Bucket | None, length: int | None = None) -> bool:
    """Move ``length`` bytes (None: until EOF) from src to dst; False at an early EOF."""
    if isinstance(src, ssl.SSLSocket) or isinstance(dst, ssl.SSLSocket):
        return _copy(src, dst, bucket, length)
    r, w = pipe
    left = length
    while left is None or left > 0:
        want = CHUNK_BYTES if left is None else min(CHUNK_BYTES, left)
        if bucket is not None:
            want = bucket.take(want)
        n = os.splice(src.fileno(), w, want)
        if n == 0:
            return False
        if bucket is not None:
            bucket.refund(want - n)
        moved = n
        while moved:
            moved -= os.splice(r, dst.fileno(), moved)
        if left is not None:
            left -= n
    return True


def _copy(src: socket.socket, dst: socket.socket, bucket: _Bucket | None,
          length: int | None) -> bool:
    """:func:`_pump` through user space: a TLS side cannot be spliced."""
    buf = bytearray(CHUNK_BYTES)
    view = memoryview(buf)
    left = length
    while left is None or left > 0:
        want = CHUNK_BYTES if left is None else min(CHUNK_BYTES, left)
        if bucket is not None:
            want = bucket.take(want)
        n = src.recv_into(view[:want])
        if n == 0:
            return False
        if bucket is not None:
            bucket.refund(want - n)
        dst.sendall(view[:n])
        if left is not None:
            left -= n
    return True


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    with contextlib.suppress(OSError):  # capped by /proc/sys/fs/pipe-max-size
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, CHUNK_BYTES)
    return r, w


def _serve(host: str, upstream_port: int, delay: float, rate: float | None, counts: Any,
           peak: Any, port: Any, ready: Any, tls: tuple[str, str] | None = None) -> None:
    context = None
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*tls)
    held = 0
    held_lock = threading.Lock()

    def head_of(client: socket.socket, carry: bytearray) -> bytes | None:
        """One request head (through the blank line); body bytes read with it stay in carry."""
        while (end := carry.find(b"\r\n\r\n")) < 0:
            data = client.recv(65536)
            if not data:
                return None
            carry += data
        head = bytes(carry[: end + 4])
        del carry[: end + 4]
        return head

    def requests(client: socket.socket, up: socket.socket) -> None:
        nonlocal held
        pipe, bucket, carry = _pipe(), _Bucket(rate) if rate else None, bytearray()
        try:
            while (head := head_of(client, carry)) is not None:
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
                with held_lock:
                    held += 1
                    peak.value = max(peak.value, held)
                time.sleep(delay)
                with held_lock:
                    held -= 1
                body = bytes(carry[:length]) if not chunked else bytes(carry)
                del carry[: len(body)]
                up.sendall(head + body)
                if chunked:  # no framing to follow: pass the rest through as it comes
                    _pump(client, up, pipe, bucket)
                    return
                if not _pump(client, up, pipe, bucket, length - len(body)):
                    return
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                up.shutdown(socket.SHUT_WR)
            for fd in pipe:
                os.close(fd)

    def responses(up: socket.socket, client: socket.socket) -> None:
        pipe = _pipe()
        try:
            _pump(up, client, pipe, _Bucket(rate) if rate else None)
        except OSError:
            pass
        finally:
            for fd in pipe:
                os.close(fd)
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)  # wakes the request thread

    def connection(client: socket.socket) -> None:
        try:
            if context is not None:
                client = context.wrap_socket(client, server_side=True)
            up = socket.create_connection((host, upstream_port))
        except OSError:
            client.close()
            return
        for s in (client, up):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=responses, args=(up, client), daemon=True)
        back.start()
        requests(client, up)
        back.join()
        up.close()
        client.close()

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    port.value = listener.getsockname()[1]
    ready.set()
    while True:
        client, _ = listener.accept()
        threading.Thread(target=connection, args=(client,), daemon=True).start()
