"""Download rows: each client reads back what its upload row stored."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from typing import Any

from bench.lib import clients
from bench.lib.blocks import namespace, row


def prepare_download(
    spec: dict[str, Any],
) -> tuple[Callable[[], dict[str, Any]], Callable[[], Any]]:
    """The timed action and a function returning what was received (a list of buffers)."""
    client, count, size, _, conc, bucket, keys, names = row(spec)
    out: list[Any] = [None] * count

    if client == "s3kv":
        import numpy as np

        from s3kv import Downloader

        rows = np.zeros((count, size), dtype=np.uint8)
        rows[:] = 1  # touch the pages, as a preallocated KV cache would be
        settings = clients.s3kv_settings(spec)
        d = Downloader(f"s3://{bucket}/{spec['prefix']}", namespace(), settings=settings)
        d.contains([])  # checks the manifest once (per Downloader, not per batch)
        into = list(rows)

        def action() -> dict[str, Any]:
            report = d.get_blocks(keys, into=into)
            bad = dict(report.failed)
            return {
                "ok": len(report.loaded),
                "failed": len(bad) + len(report.missing),
                "unverified": report.unverified,
                "error": next(iter(bad.values()), None),
            }

        return action, lambda: rows

    if client == "boto3-loop":
        s3 = clients.boto3_client(spec)

        def action() -> dict[str, Any]:
            for i, name in enumerate(names):
                out[i] = s3.get_object(Bucket=bucket, Key=name)["Body"].read()
            return {"ok": count}

        return action, lambda: out

    if client == "boto3-threads":
        from concurrent.futures import ThreadPoolExecutor

        s3 = clients.boto3_client(spec, pool=conc)
        pool = ThreadPoolExecutor(conc)

        def get(name: str) -> bytes:
            data: bytes = s3.get_object(Bucket=bucket, Key=name)["Body"].read()
            return data

        def action() -> dict[str, Any]:
            out[:] = list(pool.map(get, names))
            return {"ok": count}

        return action, lambda: out

    if client == "s3transfer":
        tm = clients.transfer_manager(spec, conc)

        def action() -> dict[str, Any]:
            sinks = [io.BytesIO() for _ in names]
            futures = [tm.download(bucket, n, f) for n, f in zip(names, sinks)]
            for f in futures:
                f.result()
            out[:] = sinks
            return {"ok": count}

        return action, lambda: [s.getbuffer() for s in out]

    if client == "obstore":
        import obstore

        store = clients.obstore_store(spec)

        async def get(i: int) -> None:
            result = await obstore.get_async(store, names[i])
            out[i] = await result.bytes_async()

        def action() -> dict[str, Any]:
            clients.gather_bounded([functools.partial(get, i) for i in range(count)], conc)
            return {"ok": count}

        return action, lambda: out

    if client == "awscrt":
        crt = clients.Crt(spec)
        sinks = [bytearray(size) for _ in range(count)]  # sized from the listing, in practice

        def action() -> dict[str, Any]:
            clients.run_window(lambda i: crt.get(bucket, names[i], sinks[i]), count, conc)
            return {"ok": count}

        return action, lambda: sinks

    if client == "awscrt-checked":
        # awscrt plus the checks s3kv makes: the stored CRC32C read from the response
        # headers and verified against the received bytes.
        crt = clients.Crt(spec)
        sinks = [bytearray(size) for _ in range(count)]
        expected: list[str | None] = [None] * count

        def get(i: int) -> Any:
            def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
                for name, value in headers:
                    if name.lower() == "x-amz-meta-s3kv-checksum":
                        expected[i] = value.partition(":")[2]

            return crt.get(bucket, names[i], sinks[i], on_headers)

        def action() -> dict[str, Any]:
            clients.run_window(get, count, conc)
            bad = sum(clients.crc32c_b64(sinks[i]) != expected[i] for i in range(count))
            return {"ok": count - bad, "failed": bad}

        return action, lambda: sinks

    raise SystemExit(f"unknown client {client!r}")
