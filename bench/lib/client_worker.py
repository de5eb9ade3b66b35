"""One measurement of bench_clients.py, in a process of its own: one client moves one
set of blocks (GET into rows, or PUT from rows) while the stand-in EngineCore loop runs
on the main thread; prints one JSON line (wall seconds, this process's CPU seconds over
the timed region, the loop's steps per second).

    python bench/lib/client_worker.py SPEC_JSON

Every client does the same checked work: a GET lands in a preallocated row and its
CRC32C is computed over the row; a PUT computes the row's CRC32C and sends it as
``x-amz-checksum-crc32c`` where the client lets it (obstore sends none: it has no
per-request headers). ``s3kv`` is whatever ``import s3kv`` finds first on the path: the
runner points it at this checkout, or at an earlier one (its own HTTP client).
``S3KV_BENCH_NO_LOOP=1`` leaves the loop out: the client alone.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import resource
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# Run by path (``python bench/lib/client_worker.py``): its own folder comes off the path and the
# repository's root goes last, so ``bench.lib`` is found and ``s3kv`` stays whichever the
# runner's PYTHONPATH or the installed package gives.
if not __package__:
    sys.path[0:1] = []
    sys.path.append(str(Path(__file__).resolve().parents[2]))

import numpy as np
from awscrt import checksums

from bench.lib import engine_loop as engine


def crc(view: Any) -> str:
    return base64.b64encode(checksums.crc32c(view).to_bytes(4, "big")).decode()


def s3kv_client(spec: dict[str, Any]) -> tuple[Any, Any]:
    from s3kv import S3Settings
    from s3kv.integrity import Checksum
    from s3kv.stores import open_store
    from s3kv.stores.base import PutOptions
    settings = S3Settings.resolve(
        endpoint_url=spec["endpoint"], region="us-east-1", access_key_id=spec["access_key"],
        secret_access_key=spec["secret_key"], concurrency=spec["concurrency"],
        ca_bundle=spec.get("ca_bundle"), tag_blocks=False)
    store = open_store(f"s3://{spec['bucket']}", settings)
    window = threading.Semaphore(spec["concurrency"])

    def run(op: str, keys: list[str], rows: np.ndarray) -> None:
        done = threading.Event()
        left = [len(keys)]
        errors: list[BaseException] = []
        lock = threading.Lock()

        def finished(_: Any, error: BaseException | None) -> None:
            if error is not None:
                errors.append(error)
            window.release()
            with lock:
                left[0] -= 1
                if not left[0]:
                    done.set()

        for key, row in zip(keys, rows):
            view = memoryview(row).cast("B")
            window.acquire()
            if op == "get":
                def got(info: Any, error: BaseException | None, view: Any = view) -> None:
                    if error is None:
                        crc(view)
                    finished(info, error)
                store.submit_get_into(key, view, got)
            else:
                value = crc(view)
                options = PutOptions(create_only=False, checksum=Checksum("crc32c", value))
                store.submit_put(key, view, options, finished)
        done.wait()
        if errors:
            raise errors[0]

    return run, store.close


def obstore_client(spec: dict[str, Any]) -> tuple[Any, Any]:
    import obstore
    from obstore.store import S3Store

    options: dict[str, Any] = {"allow_http": True}
    if spec.get("ca_bundle"):
        options["root_certificate"] = Path(spec["ca_bundle"]).read_text()
    store = S3Store(spec["bucket"], endpoint=spec["endpoint"], region="us-east-1",
                    access_key_id=spec["access_key"], secret_access_key=spec["secret_key"],
                    virtual_hosted_style_request=False, client_options=options)
    pool = ThreadPoolExecutor(spec["concurrency"])

    def one(op: str, key: str, row: np.ndarray) -> None:
        view = memoryview(row).cast("B")
        if op == "get":
            data = obstore.get(store, key).bytes()
            src = np.frombuffer(memoryview(data), dtype=np.uint8)
            if len(src) != len(view):
                raise RuntimeError(f"{key}: {len(src)} bytes")
            ctypes.memmove(row.ctypes.data, src.ctypes.data, len(src))  # without the GIL
            crc(view)
        else:
            crc(view)
            obstore.put(store, key, view)

    def run(op: str, keys: list[str], rows: np.ndarray) -> None:
        list(pool.map(lambda kr: one(op, *kr), zip(keys, rows)))

    return run, pool.shutdown


def urllib3_client(spec: dict[str, Any]) -> tuple[Any, Any]:
    import urllib3
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    creds = Credentials(spec["access_key"], spec["secret_key"])
    http = urllib3.PoolManager(maxsize=spec["concurrency"], ca_certs=spec.get("ca_bundle"),
                               retries=False)
    pool = ThreadPoolExecutor(spec["concurrency"])

    class Unsigned:
        s3 = {"payload_signing_enabled": False}  # noqa: RUF012

    def signed(method: str, url: str, headers: dict[str, str]) -> dict[str, str]:
        request = AWSRequest(method=method, url=url, headers=headers)
        request.context["client_config"] = Unsigned()
        S3SigV4Auth(creds, "s3", "us-east-1").add_auth(request)
        return dict(request.headers.items())

    def one(op: str, key: str, row: np.ndarray) -> None:
        view = memoryview(row).cast("B")
        url = f"{spec['endpoint']}/{spec['bucket']}/{key}"
        if op == "get":
            resp = http.request("GET", url, headers=signed("GET", url, {}),
                                preload_content=False)
            pos = 0
            while pos < len(view):
                got = resp.readinto(view[pos:])
                if not got:
                    raise RuntimeError(f"{key}: cut short")
                pos += got
            resp.release_conn()
            crc(view)
        else:
            headers = signed("PUT", url, {"x-amz-checksum-crc32c": crc(view),
                                          "Content-Length": str(len(view))})
            resp = http.request("PUT", url, body=view, headers=headers)
            if resp.status >= 300:
                raise RuntimeError(f"{key}: {resp.status}")

    def run(op: str, keys: list[str], rows: np.ndarray) -> None:
        list(pool.map(lambda kr: one(op, *kr), zip(keys, rows)))

    return run, pool.shutdown


def boto3_client(spec: dict[str, Any]) -> tuple[Any, Any]:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3", endpoint_url=spec["endpoint"], region_name="us-east-1",
        aws_access_key_id=spec["access_key"], aws_secret_access_key=spec["secret_key"],
        verify=spec.get("ca_bundle") or True,
        config=Config(max_pool_connections=spec["concurrency"], s3={"addressing_style": "path"},
                      request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"))
    pool = ThreadPoolExecutor(spec["concurrency"])

    def one(op: str, key: str, row: np.ndarray) -> None:
        view = memoryview(row).cast("B")
        if op == "get":
            body = client.get_object(Bucket=spec["bucket"], Key=key)["Body"]
            pos = 0
            while pos < len(view):
                got = body._raw_stream.readinto(view[pos:])
                if not got:
                    raise RuntimeError(f"{key}: cut short")
                pos += got
            crc(view)
        else:
            client.put_object(Bucket=spec["bucket"], Key=key, Body=bytes(view),
                              ChecksumCRC32C=crc(view))

    def run(op: str, keys: list[str], rows: np.ndarray) -> None:
        list(pool.map(lambda kr: one(op, *kr), zip(keys, rows)))

    return run, pool.shutdown


CLIENTS = {"s3kv": s3kv_client, "s3kv-own": s3kv_client, "obstore": obstore_client,
           "urllib3": urllib3_client, "boto3": boto3_client}


def main() -> int:
    spec = json.loads(sys.argv[1])
    keys = spec["keys"]
    rows = np.zeros((len(keys), spec["size"]), dtype=np.uint8)
    if spec["op"] == "put":
        rows[:] = np.random.default_rng(spec["size"]).integers(0, 256, rows.shape, np.uint8)
    run, close = CLIENTS[spec["client"]](spec)
    engine.calibrate()
    run(spec["op"], keys[: min(4, len(keys))], rows[: min(4, len(keys))])  # warm connections
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    box: list[BaseException] = []

    def work() -> None:
        try:
            run(spec["op"], keys, rows)
        except BaseException as exc:  # reported by the main thread
            box.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    if os.environ.get("S3KV_BENCH_NO_LOOP"):  # the client alone, for comparison
        thread.join()
        steps = engine.Steps(time.perf_counter() - t0)
    else:
        steps = engine.run_until(lambda: not thread.is_alive())
    seconds = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    if box:
        raise box[0]
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    cpu -= steps.work_cpu_seconds  # the stand-in loop's own Python work
    if spec["op"] == "get" and spec.get("expect_seed") is not None:
        want = np.random.default_rng(spec["expect_seed"]).integers(0, 256, spec["size"], np.uint8)
        if not np.array_equal(rows[0], want):
            raise RuntimeError(f"{spec['client']}: the first block read is not what was stored")
    close()
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, **steps.summary()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
