"""One benchmark row in its own process: ``python bench/_workers.py '<json spec>'``.

Run by ``bench/bench_transfer.py``; prints one JSON line (the last line of stdout).
Setup (imports, clients, payloads) happens before the timed region; the timed region
measures wall time and this process's own CPU (``getrusage(RUSAGE_SELF)``: user + sys of
every thread, native ones included).
"""

from __future__ import annotations

import hashlib
import io
import json
import resource
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CLIENTS = (
    "s3kv",
    "boto3-loop",
    "boto3-threads",
    "s3transfer",
    "obstore",
    "awscrt",
    "awscrt-checked",
)
CHECKED_TAGGING = "s3kv-object=block"


# -- payloads and keys (the same for every client) -------------------------------------


def payload(seed: int, i: int, size: int) -> bytes:
    import numpy as np

    return np.random.default_rng([seed, i]).bytes(size)


def offload_keys(seed: int, count: int) -> list[bytes]:
    from s3kv import make_offload_key

    return [
        make_offload_key(hashlib.sha256(f"{seed}:{i}".encode()).digest(), 0) for i in range(count)
    ]


def namespace() -> Any:
    from s3kv import Namespace

    return Namespace(model_name=MODEL, tokens_per_hash=16, dtype="bfloat16")


def object_keys(spec: dict[str, Any], keys: list[bytes]) -> list[str]:
    """The object keys s3kv writes; every client uses the same names."""
    from s3kv import KeyMapper
    from s3kv.location import parse_location

    location = parse_location(f"s3://{spec['bucket']}/{spec['prefix']}")
    mapper = KeyMapper(namespace(), prefix=location.prefix)
    return [mapper.key_for(k) for k in keys]


def sample_indices(count: int, samples: int) -> list[int]:
    if count <= samples:
        return list(range(count))
    step = (count - 1) / (samples - 1)
    return sorted({round(i * step) for i in range(samples)})


# -- clients ---------------------------------------------------------------------------


def boto3_client(spec: dict[str, Any], pool: int | None = None) -> Any:
    """boto3 as a user configures it: defaults, plus a pool as large as the concurrency."""
    import boto3
    from botocore.config import Config

    kwargs: dict[str, Any] = {"s3": {"addressing_style": "path"}}
    if pool is not None:
        kwargs["max_pool_connections"] = pool
    if spec.get("boto3_checksum") == "when_required":
        kwargs["request_checksum_calculation"] = "when_required"
        kwargs["response_checksum_validation"] = "when_required"
    verify: Any = spec["ca_bundle"] if spec.get("ca_bundle") else None
    return boto3.session.Session().client(
        "s3",
        endpoint_url=spec["endpoint"],
        region_name=spec["region"],
        aws_access_key_id=spec["access_key"],
        aws_secret_access_key=spec["secret_key"],
        config=Config(**kwargs),
        verify=verify,
    )


def s3kv_settings(spec: dict[str, Any]) -> Any:
    from s3kv import S3Settings

    return S3Settings.resolve(
        endpoint_url=spec["endpoint"],
        region=spec["region"],
        access_key_id=spec["access_key"],
        secret_access_key=spec["secret_key"],
        concurrency=spec["concurrency"],
        ca_bundle=spec.get("ca_bundle"),
    )


def obstore_store(spec: dict[str, Any]) -> Any:
    from obstore.store import S3Store

    options: Any = {"allow_http": True}
    if spec.get("ca_bundle"):
        with open(spec["ca_bundle"], "rb") as f:
            options["root_certificate"] = f.read()
    return S3Store(
        spec["bucket"],
        endpoint=spec["endpoint"],
        access_key_id=spec["access_key"],
        secret_access_key=spec["secret_key"],
        region=spec["region"],
        virtual_hosted_style_request=False,
        client_options=options,
    )


class Crt:
    """awscrt's S3 client (what the AWS CLI's CRT transfer uses), path-style requests."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from urllib.parse import urlsplit

        from awscrt import auth, s3
        from awscrt import io as aio

        self.s3 = s3
        url = urlsplit(spec["endpoint"])
        self.host = url.netloc
        self.base = url.path.rstrip("/")
        elg = aio.EventLoopGroup(0)  # one event loop per core
        bootstrap = aio.ClientBootstrap(elg, aio.DefaultHostResolver(elg))
        creds = auth.AwsCredentialsProvider.new_static(spec["access_key"], spec["secret_key"])
        kwargs: dict[str, Any] = {}
        if url.scheme == "https":
            tls = aio.TlsContextOptions()
            if spec.get("ca_bundle"):
                tls.override_default_trust_store_from_path(ca_filepath=spec["ca_bundle"])
            kwargs["tls_connection_options"] = aio.ClientTlsContext(tls).new_connection_options()
            kwargs["tls_mode"] = s3.S3RequestTlsMode.ENABLED
        else:
            kwargs["tls_mode"] = s3.S3RequestTlsMode.DISABLED
        self.client = s3.S3Client(
            bootstrap=bootstrap,
            region=spec["region"],
            credential_provider=creds,
            max_active_connections_override=spec["concurrency"],
            **kwargs,
        )

    def path(self, bucket: str, key: str) -> str:
        from urllib.parse import quote

        return f"{self.base}/{bucket}/{quote(key)}"

    def put(
        self, bucket: str, key: str, data: bytes, extra: tuple[tuple[str, str], ...] = ()
    ) -> Any:
        from awscrt.http import HttpHeaders, HttpRequest

        fields = [("Host", self.host), ("Content-Length", str(len(data))), *extra]
        request = HttpRequest("PUT", self.path(bucket, key), HttpHeaders(fields), io.BytesIO(data))
        return self.client.make_request(type=self.s3.S3RequestType.PUT_OBJECT, request=request)

    def get(
        self,
        bucket: str,
        key: str,
        out: bytearray,
        on_headers: Callable[..., None] | None = None,
    ) -> Any:
        from awscrt.http import HttpHeaders, HttpRequest

        view = memoryview(out)

        def on_body(chunk: bytes, offset: int, **_: Any) -> None:
            view[offset : offset + len(chunk)] = chunk

        headers = HttpHeaders([("Host", self.host)])
        request = HttpRequest("GET", self.path(bucket, key), headers)
        return self.client.make_request(
            type=self.s3.S3RequestType.GET_OBJECT,
            request=request,
            on_body=on_body,
            on_headers=on_headers,
        )


def crc32c_b64(data: Any) -> str:
    import base64

    from awscrt.checksums import crc32c

    return base64.b64encode(crc32c(data).to_bytes(4, "big")).decode("ascii")


def run_window(submit: Callable[[int], Any], count: int, window: int) -> None:
    """Keep ``window`` awscrt requests in flight until ``count`` are done."""
    from collections import deque

    inflight: deque[Any] = deque()
    for i in range(count):
        if len(inflight) >= window:
            inflight.popleft().finished_future.result()
        inflight.append(submit(i))
    while inflight:
        inflight.popleft().finished_future.result()


# -- rows ------------------------------------------------------------------------------


def prepare_upload(spec: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """Set up a client and its payloads; return the timed action."""
    client, count, size, seed, conc = (
        spec["client"],
        spec["count"],
        spec["size"],
        spec["seed"],
        spec["concurrency"],
    )
    bucket = spec["bucket"]
    keys = offload_keys(seed, count)
    names = object_keys(spec, keys)

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
        from boto3.s3.transfer import TransferConfig, create_transfer_manager

        s3 = boto3_client(spec, pool=conc)
        tm = create_transfer_manager(
            s3, TransferConfig(max_concurrency=conc, preferred_transfer_client="classic")
        )

        def action() -> dict[str, Any]:
            futures = [tm.upload(io.BytesIO(b), bucket, n) for n, b in zip(names, data)]
            for f in futures:
                f.result()
            return {"ok": count}

        return action

    if client == "obstore":
        import asyncio

        import obstore

        store = obstore_store(spec)

        def action() -> dict[str, Any]:
            async def main() -> None:
                sem = asyncio.Semaphore(conc)

                async def one(n: str, b: bytes) -> None:
                    async with sem:
                        await obstore.put_async(store, n, b)

                await asyncio.gather(*(one(n, b) for n, b in zip(names, data)))

            asyncio.run(main())
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


def prepare_download(
    spec: dict[str, Any],
) -> tuple[Callable[[], dict[str, Any]], Callable[[], Any]]:
    """The timed action and a function returning what was received (a list of buffers)."""
    client, count, size, seed, conc = (
        spec["client"],
        spec["count"],
        spec["size"],
        spec["seed"],
        spec["concurrency"],
    )
    bucket = spec["bucket"]
    keys = offload_keys(seed, count)
    names = object_keys(spec, keys)
    out: list[Any] = [None] * count

    if client == "s3kv":
        import numpy as np

        from s3kv import Downloader

        rows = np.zeros((count, size), dtype=np.uint8)
        rows[:] = 1  # touch the pages, as a preallocated KV cache would be
        d = Downloader(f"s3://{bucket}/{spec['prefix']}", namespace(), settings=s3kv_settings(spec))
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
        s3 = boto3_client(spec)

        def action() -> dict[str, Any]:
            for i, name in enumerate(names):
                out[i] = s3.get_object(Bucket=bucket, Key=name)["Body"].read()
            return {"ok": count}

        return action, lambda: out

    if client == "boto3-threads":
        from concurrent.futures import ThreadPoolExecutor

        s3 = boto3_client(spec, pool=conc)
        pool = ThreadPoolExecutor(conc)

        def get(name: str) -> bytes:
            data: bytes = s3.get_object(Bucket=bucket, Key=name)["Body"].read()
            return data

        def action() -> dict[str, Any]:
            out[:] = list(pool.map(get, names))
            return {"ok": count}

        return action, lambda: out

    if client == "s3transfer":
        from boto3.s3.transfer import TransferConfig, create_transfer_manager

        s3 = boto3_client(spec, pool=conc)
        tm = create_transfer_manager(
            s3, TransferConfig(max_concurrency=conc, preferred_transfer_client="classic")
        )

        def action() -> dict[str, Any]:
            sinks = [io.BytesIO() for _ in names]
            futures = [tm.download(bucket, n, f) for n, f in zip(names, sinks)]
            for f in futures:
                f.result()
            out[:] = sinks
            return {"ok": count}

        return action, lambda: [s.getbuffer() for s in out]

    if client == "obstore":
        import asyncio

        import obstore

        store = obstore_store(spec)

        def action() -> dict[str, Any]:
            async def main() -> None:
                sem = asyncio.Semaphore(conc)

                async def one(i: int, n: str) -> None:
                    async with sem:
                        result = await obstore.get_async(store, n)
                        out[i] = await result.bytes_async()

                await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))

            asyncio.run(main())
            return {"ok": count}

        return action, lambda: out

    if client == "awscrt":
        crt = Crt(spec)
        sinks = [bytearray(size) for _ in range(count)]  # sized from the listing, in practice

        def action() -> dict[str, Any]:
            run_window(lambda i: crt.get(bucket, names[i], sinks[i]), count, conc)
            return {"ok": count}

        return action, lambda: sinks

    if client == "awscrt-checked":
        # awscrt plus the checks s3kv makes: the stored CRC32C read from the response
        # headers and verified against the received bytes.
        crt = Crt(spec)
        sinks = [bytearray(size) for _ in range(count)]
        expected: list[str | None] = [None] * count

        def get(i: int) -> Any:
            def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
                for name, value in headers:
                    if name.lower() == "x-amz-meta-s3kv-checksum":
                        expected[i] = value.partition(":")[2]

            return crt.get(bucket, names[i], sinks[i], on_headers)

        def action() -> dict[str, Any]:
            run_window(get, count, conc)
            bad = sum(crc32c_b64(sinks[i]) != expected[i] for i in range(count))
            return {"ok": count - bad, "failed": bad}

        return action, lambda: sinks

    raise SystemExit(f"unknown client {client!r}")


def prepare_lookup(spec: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    bucket, chain = spec["bucket"], spec["chain"]
    keys = offload_keys(spec["seed"], chain)
    if spec["client"] == "s3kv":
        from s3kv import Downloader

        d = Downloader(f"s3://{bucket}/{spec['prefix']}", namespace(), settings=s3kv_settings(spec))
        d.contains([])  # manifest check, once per Downloader

        def action() -> dict[str, Any]:
            found = d.lookup(keys)
            return {
                "found": found,
                "rounds": d.last_lookup.rounds,
                "requests": d.last_lookup.requests,
            }

        return action
    if spec["client"] == "naive-head":
        from botocore.exceptions import ClientError

        s3 = boto3_client(spec)
        names = object_keys(spec, keys)

        def action() -> dict[str, Any]:
            found = requests = 0
            for name in names:
                requests += 1
                try:
                    s3.head_object(Bucket=bucket, Key=name)
                except ClientError as exc:
                    if exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
                        break
                    raise
                found += 1
            return {"found": found, "rounds": requests, "requests": requests}

        return action
    raise SystemExit(f"unknown lookup client {spec['client']!r}")


def populate(spec: dict[str, Any]) -> dict[str, Any]:
    """Store the first ``count`` blocks of a chain with s3kv (lookup setup, untimed)."""
    import numpy as np

    from s3kv import Uploader

    keys = offload_keys(spec["seed"], spec["count"])
    row = np.frombuffer(payload(spec["seed"], 0, spec["size"]), dtype=np.uint8)
    with Uploader(
        f"s3://{spec['bucket']}/{spec['prefix']}", namespace(), settings=s3kv_settings(spec)
    ) as up:
        report = up.put_blocks({k: row for k in keys})
    return {"ok": len(report.stored) + len(report.already_present), "failed": len(report.failed)}


# -- timing ----------------------------------------------------------------------------


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def timed(action: Callable[[], dict[str, Any]], profile: str | None) -> dict[str, Any]:
    profilers: list[Any] = []
    if profile:
        import cProfile
        import threading

        def start_in_thread(*_: Any) -> None:  # profile every thread started from now on
            p = cProfile.Profile()
            profilers.append(p)
            sys.setprofile(None)
            p.enable()

        threading.setprofile(start_in_thread)
        main = cProfile.Profile()
        profilers.append(main)
        main.enable()
    c0, t0 = cpu_seconds(), time.perf_counter()
    result = action()
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    if profile:
        import pstats
        import threading

        threading.setprofile(None)
        main.disable()
        stats = pstats.Stats(profilers[0])
        for p in profilers[1:]:
            p.create_stats()
            stats.add(p)
        stats.dump_stats(profile)
    result.update(seconds=seconds, cpu=cpu)
    return result


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        if spec["op"] == "populate":
            print(json.dumps(populate(spec)))
            return
        if spec["op"] == "upload":
            result = timed(prepare_upload(spec), spec.get("profile"))
        elif spec["op"] == "download":
            action, received = prepare_download(spec)
            result = timed(action, spec.get("profile"))
            got = received()
            bad = [
                i
                for i in sample_indices(spec["count"], spec["samples"])
                if got[i] is None or bytes(got[i]) != payload(spec["seed"], i, spec["size"])
            ]
            result["verified"] = len(sample_indices(spec["count"], spec["samples"])) - len(bad)
            result["mismatched"] = len(bad)
        elif spec["op"] == "lookup":
            result = timed(prepare_lookup(spec), spec.get("profile"))
        else:
            raise SystemExit(f"unknown op {spec['op']!r}")
    except Exception as exc:  # report, never hang the driver
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
