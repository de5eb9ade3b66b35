"""The clients a benchmark row can use, each set up the way its users configure it.

boto3 (plain, threads, s3transfer), obstore, awscrt's S3 client, and s3kv's settings;
``CLIENTS`` is the one list of rows the runner and the workers share.
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

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


def transfer_manager(spec: dict[str, Any], concurrency: int) -> Any:
    """s3transfer's manager on a boto3 client, ``concurrency`` threads (its classic client)."""
    from boto3.s3.transfer import TransferConfig, create_transfer_manager

    s3 = boto3_client(spec, pool=concurrency)
    config = TransferConfig(max_concurrency=concurrency, preferred_transfer_client="classic")
    return create_transfer_manager(s3, config)


def gather_bounded(calls: Sequence[Callable[[], Awaitable[None]]], concurrency: int) -> None:
    """Run the async calls on one event loop, at most ``concurrency`` at once (obstore)."""
    import asyncio

    async def main() -> None:
        sem = asyncio.Semaphore(concurrency)

        async def one(call: Callable[[], Awaitable[None]]) -> None:
            async with sem:
                await call()

        await asyncio.gather(*(one(c) for c in calls))

    asyncio.run(main())


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
