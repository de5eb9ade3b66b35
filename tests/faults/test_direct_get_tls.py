"""The direct GET path over TLS (memory BIOs): a server that stalls in the middle of a
body, or hangs up there, ends the read within the read timeout; a good answer lands
whole. A tiny TLS server of the test's own plays the store (the fault proxy speaks
plain HTTP; RGW over TLS is covered in tests/functional/test_store.py)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from s3kv import S3Settings, TransientStoreError
from s3kv.stores.direct import Direct
from s3kv.stores.endpoint import DataEndpoint
from tests.servers.rgw_cluster import make_cert

SIZE = 2 * 1024 * 1024
BODY = bytes(range(256)) * (SIZE // 256)


class _Credentials:
    def get_frozen_credentials(self) -> object:
        from botocore.credentials import ReadOnlyCredentials

        return ReadOnlyCredentials("testing", "testing", None)


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    def run(*argv: object) -> None:
        subprocess.run([str(a) for a in argv], check=True, capture_output=True)

    return make_cert(run, tmp_path_factory.mktemp("tls"))


@pytest.fixture
def server(cert: tuple[Path, Path]) -> Iterator[Callable[[str], str]]:
    """``server(mode)``: a TLS server answering every GET as ``mode`` says; its URL."""
    made: list[socket.socket] = []

    def start(mode: str) -> str:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*cert)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        made.append(listener)

        def serve(conn: socket.socket) -> None:
            try:
                tls = context.wrap_socket(conn, server_side=True)
            except OSError:
                conn.close()
                return
            try:
                while True:
                    head = b""
                    while b"\r\n\r\n" not in head:
                        chunk = tls.recv(65536)
                        if not chunk:
                            return
                        head += chunk
                    tls.sendall(
                        b"HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nContent-Type: binary/octet-stream"
                        + f"\r\nContent-Length: {SIZE}\r\n\r\n".encode()
                    )
                    if mode == "ok":
                        tls.sendall(BODY)
                        continue
                    tls.sendall(BODY[: SIZE // 2])
                    if mode == "stall":
                        time.sleep(5)
                    return  # "hangup": the connection closes mid-body
            except OSError:
                return
            finally:
                tls.close()

        def accept() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        return f"https://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for listener in made:
        listener.close()


def direct(url: str, ca: Path, read_timeout: float) -> Direct:
    host = url.split("//", 1)[1]
    endpoint = DataEndpoint(url=url, tls=True, host=host, hostname="127.0.0.1", path="/b",
                            region="us-east-1")
    settings = S3Settings(connect_timeout_seconds=1, read_timeout_seconds=read_timeout,
                          ca_bundle=ca)
    return Direct(endpoint, _Credentials(), settings, connections=2)


def get(gets: Direct, buffer: bytearray) -> tuple[object, BaseException | None]:
    finished = threading.Event()
    out: list[object] = []

    def done(info: object, error: BaseException | None) -> None:
        out.extend([info, error])
        finished.set()

    gets.submit_get("k", "s3://b/k", memoryview(buffer), done)
    assert finished.wait(10)
    return out[0], out[1]  # type: ignore[return-value]


def test_a_good_answer_lands_whole_over_tls(server: Callable[[str], str],
                                            cert: tuple[Path, Path]) -> None:
    gets = direct(server("ok"), cert[0], read_timeout=2)
    try:
        for _ in range(2):  # the second GET reuses the kept-alive TLS connection
            buffer = bytearray(SIZE)
            _, error = get(gets, buffer)
            assert error is None and bytes(buffer) == BODY
    finally:
        gets.close()


@pytest.mark.parametrize("mode", ["stall", "hangup"])
def test_a_body_that_stops_midway_ends_within_the_read_timeout(
    server: Callable[[str], str], cert: tuple[Path, Path], mode: str
) -> None:
    gets = direct(server(mode), cert[0], read_timeout=0.5)
    try:
        buffer = bytearray(SIZE)
        started = time.monotonic()
        info, error = get(gets, buffer)
        took = time.monotonic() - started
    finally:
        gets.close()
    assert info is None and isinstance(error, TransientStoreError), error
    assert took < 0.5 + 0.5  # the read timeout, not the server's 5 s stall
    assert ("no answer" in str(error)) == (mode == "stall"), error
