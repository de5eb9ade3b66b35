"""The AWS-like link (bench/lib/latency_proxy.py): latency per request, a rate cap per
connection, bodies passed through intact, requests counted per method."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from bench.lib.latency_proxy import LatencyProxy

pytestmark = pytest.mark.functional

BODY = bytes(range(256)) * 8192  # 2 MiB


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients use it
    received: ClassVar[list[bytes]] = []

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()

    def do_PUT(self) -> None:
        Handler.received.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def connect(proxy: LatencyProxy) -> http.client.HTTPConnection:
    host, port = proxy.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=10)


def test_each_request_on_a_kept_alive_connection_waits_the_first_byte_latency(
        upstream: str) -> None:
    with LatencyProxy(upstream, delay_seconds=0.08) as proxy:
        conn = connect(proxy)
        for method in ("HEAD", "GET", "GET"):
            t0 = time.perf_counter()
            conn.request(method, "/bucket/key")
            response = conn.getresponse()
            body = response.read()
            assert time.perf_counter() - t0 >= 0.08
            assert body == (BODY if method == "GET" else b"")
        conn.close()
        assert proxy.counts() == {"HEAD": 1, "GET": 2, "PUT": 0, "POST": 0, "DELETE": 0,
                                  "OTHER": 0}
        assert proxy.peak_in_flight() == 1


def test_the_rate_cap_paces_each_connection(upstream: str) -> None:
    rate = 10_000_000  # 2 MiB at 10 MB/s: at least 0.2 s, less the first chunk's burst
    with LatencyProxy(upstream, delay_seconds=0, rate_bytes_per_second=rate) as proxy:
        conn = connect(proxy)
        t0 = time.perf_counter()
        conn.request("GET", "/bucket/key")
        assert conn.getresponse().read() == BODY
        seconds = time.perf_counter() - t0
        conn.close()
    assert seconds >= (len(BODY) - 64 * 1024) / rate * 0.95


def test_request_bodies_arrive_intact_and_are_paced_too(upstream: str) -> None:
    Handler.received.clear()
    rate = 10_000_000
    with LatencyProxy(upstream, delay_seconds=0, rate_bytes_per_second=rate) as proxy:
        conn = connect(proxy)
        t0 = time.perf_counter()
        for _ in range(2):
            conn.request("PUT", "/bucket/key", body=BODY)
            assert conn.getresponse().read() == b""
        seconds = time.perf_counter() - t0
        conn.close()
        assert proxy.counts()["PUT"] == 2
    assert Handler.received == [BODY, BODY]
    assert seconds >= (2 * len(BODY) - 64 * 1024) / rate * 0.95


def test_the_proxy_refuses_an_https_upstream() -> None:
    with pytest.raises(ValueError, match="not http://"):
        LatencyProxy("https://127.0.0.1:1")
