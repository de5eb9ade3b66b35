"""Upload rows: each client stores ``count`` blocks of ``size`` bytes (timed region only)."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from typing import Any

from bench.lib.blocks import namespace, payload, row
from bench.lib.clients import (
    CHECKED_TAGGING,
    Crt,
    boto3_client,
    crc32c_b64,
    gather_bounded,
    obstore_store,
    run_window,
    s3kv_settings,
    transfer_manager,
)


def prepare_upload(spec: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """Set up a client and its payloads; return the timed action."""
    client, count, size, seed, conc, bucket, keys, names = row(spec)

    if client == "s3kv":
        import numpy as np

        from s3kv import Uploader

        rows = np.empty((count, size), dtype=np.uint8)
        for i in range(count):
            rows[i] = np.frombuffer(payload(seed, i, size), dtype=np.uint8)
        up = Uploader(f"s3://{bucket}/{spec['prefix']}", namespace(), settings=s3kv_settings(spec))
        up.ensure_manifest()  # one-time per namespace, not per batch

        def action() -> dict[str, Any]:
            report = up.put_blocks({k: rows[i] for i, k in enumerate(keys)})
            ok = len(report.stored) + len(report.already_present)
            return {
                "ok": ok,
                "failed": len(report.failed),
                "error": next(iter(report.failed.values()), None),
            }

        return action

    data = [payload(seed, i, size) for i in range(count)]

    if client == "boto3-loop":
        s3 = boto3_client(spec)

        def action() -> dict[str, Any]:
            for name, body in zip(names, data):
                s3.put_object(Bucket=bucket, Key=name, Body=body)
            return {"ok": count}

        return action

    if client == "boto3-threads":
        from concurrent.futures import ThreadPoolExecutor

        s3 = boto3_client(spec, pool=conc)
        pool = ThreadPoolExecutor(conc)

        def action() -> dict[str, Any]:
            futures = [
                pool.submit(s3.put_object, Bucket=bucket, Key=n, Body=b)
                for n, b in zip(names, data)
            ]
            for f in futures:
                f.result()
            return {"ok": count}

        return action

    if client == "s3transfer":
        tm = transfer_manager(spec, conc)

        def action() -> dict[str, Any]:
            futures = [tm.upload(io.BytesIO(b), bucket, n) for n, b in zip(names, data)]
            for f in futures:
                f.result()
            return {"ok": count}

        return action

    if client == "obstore":
        import obstore

        store = obstore_store(spec)

        async def put(i: int) -> None:
            await obstore.put_async(store, names[i], data[i])

        def action() -> dict[str, Any]:
            gather_bounded([functools.partial(put, i) for i in range(count)], conc)
            return {"ok": count}

        return action

    if client == "awscrt":
        crt = Crt(spec)

        def action() -> dict[str, Any]:
            run_window(lambda i: crt.put(bucket, names[i], data[i]), count, conc)
            return {"ok": count}

        return action

    if client == "awscrt-checked":
        # awscrt doing by hand what s3kv does per block: CRC32C computed at upload time,
        # sent as metadata and S3 checksum header, create-only, tagged.
        crt = Crt(spec)

        def put(i: int) -> Any:
            value = crc32c_b64(data[i])
            extra = (
                ("If-None-Match", "*"),
                ("x-amz-meta-s3kv-checksum", f"crc32c:{value}"),
                ("x-amz-checksum-crc32c", value),
                ("x-amz-tagging", CHECKED_TAGGING),
            )
            return crt.put(bucket, names[i], data[i], extra)

        def action() -> dict[str, Any]:
            run_window(put, count, conc)
            return {"ok": count}

        return action

    raise SystemExit(f"unknown client {client!r}")
