"""The ceiling of a prompt load: what the client library and the machine allow.

Two loads of the same bytes with nothing of a tier around them:

* ``CrtGets``: awscrt's S3 client (the library s3kv's data path runs on) GETs every block
  of the prompt into its row of a preallocated region, all requests submitted at once;
  no tier, no checksum, no per-block bookkeeping beyond counting the bytes (checked
  after the clock stops). ``CrtGets.s3kv()`` uses the settings s3kv's store uses today
  (``s3kv.stores.crt``: its part size, one connection per I/O thread); other part
  sizes and connection counts name themselves ``awscrt 4 MiB x 32``.
* ``memcpy()``: numpy copies the prompt's rows into the load rows (the machine's
  memory bandwidth; what a load from a local cache could at best be).

awscrt-python hands each body part to a Python callback as ``bytes``; copying it into
the row is the least a Python client can do, so the ceiling includes that copy.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote, urlsplit

import numpy as np

MiB = 1 << 20


class CrtGets:
    """GET_OBJECT of each key into a row, on one awscrt S3Client; ``load()`` times it."""

    def __init__(self, *, endpoint: str, access_key: str, secret_key: str, ca_bundle: str | None,
                 part_bytes: int, connections: int, name: str | None = None,
                 region: str = "us-east-1") -> None:
        from awscrt import auth, s3
        from awscrt import io as crt_io

        self._s3 = s3
        url = urlsplit(endpoint)
        self.host, self.base = url.netloc, url.path.rstrip("/")
        self.part_bytes, self.connections = part_bytes, connections
        self.name = name or f"awscrt {part_bytes // MiB} MiB x {connections}"
        elg = crt_io.EventLoopGroup(0)
        bootstrap = crt_io.ClientBootstrap(elg, crt_io.DefaultHostResolver(elg))
        kwargs: dict[str, Any] = {"tls_mode": s3.S3RequestTlsMode.DISABLED}
        if url.scheme == "https":
            options = crt_io.TlsContextOptions()
            if ca_bundle:
                options.override_default_trust_store_from_path(ca_filepath=ca_bundle)
            connection = crt_io.ClientTlsContext(options).new_connection_options()
            connection.set_server_name(url.hostname or self.host)
            kwargs = {"tls_mode": s3.S3RequestTlsMode.ENABLED,
                      "tls_connection_options": connection}
        self.client = s3.S3Client(
            bootstrap=bootstrap, region=region,
            credential_provider=auth.AwsCredentialsProvider.new_static(access_key, secret_key),
            part_size=part_bytes, max_active_connections_override=connections, **kwargs)

    @classmethod
    def s3kv(cls, *, connections: int, **link: Any) -> CrtGets:
        """The settings s3kv's awscrt store uses today (part size; connections = threads)."""
        from s3kv.stores.crt_client import PART_BYTES

        return cls(part_bytes=PART_BYTES, connections=connections,
                   name="awscrt GETs (s3kv's settings)", **link)

    def load(self, bucket: str, keys: list[str], rows: np.ndarray) -> tuple[float, float]:
        """GET ``keys[i]`` into ``rows[i]``; (wall seconds, this process's CPU seconds)."""
        from awscrt.http import HttpHeaders, HttpRequest

        got = [[0] for _ in keys]
        c0, t0 = time.process_time(), time.perf_counter()
        requests = []
        for key, row, count in zip(keys, rows, got):
            view = memoryview(row).cast("B")

            def on_body(chunk: bytes, offset: int, view: memoryview = view,
                        count: list[int] = count, **_: Any) -> None:
                view[offset:offset + len(chunk)] = chunk
                count[0] += len(chunk)

            request = HttpRequest("GET", f"{self.base}/{bucket}/{quote(key, safe='/~')}",
                                  HttpHeaders([("Host", self.host)]))
            requests.append(self.client.make_request(
                type=self._s3.S3RequestType.GET_OBJECT, request=request, on_body=on_body))
        for r in requests:
            r.finished_future.result()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        moved = sum(c[0] for c in got)
        if moved != rows[: len(keys)].nbytes:
            raise RuntimeError(f"{self.name}: {moved} bytes received, expected "
                               f"{rows[: len(keys)].nbytes}")
        return seconds, cpu

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "part_bytes": self.part_bytes,
                "connections": self.connections}


def memcpy(src: np.ndarray, dst: np.ndarray) -> tuple[float, float]:
    """Copy the prompt's rows (numpy, one call); (wall seconds, CPU seconds)."""
    c0, t0 = time.process_time(), time.perf_counter()
    np.copyto(dst, src)
    return time.perf_counter() - t0, time.process_time() - c0


def parse(spec: str) -> tuple[int, int] | None:
    """``crt`` -> None (s3kv's settings); ``crt:PART_MIB:CONNECTIONS`` -> (bytes, count)."""
    if spec == "crt":
        return None
    try:
        _, part, conns = spec.split(":")
        return int(float(part) * MiB), int(conns)
    except ValueError:
        raise SystemExit(f"--ceilings: {spec!r} is not crt, crt:PART_MIB:CONNECTIONS or "
                         "memcpy (e.g. crt:4:32)") from None
