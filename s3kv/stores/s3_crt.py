"""The block data path on awscrt's native S3 client; boto3 keeps the control plane.

Why: botocore spends about 1.4 ms of CPU per request (event hooks, signing, header
parsing); s3kv on awscrt's client about 0.3 ms (see docs/benchmarks.md, transfers). KV blocks are
many small objects, so block PUT, GET and HEAD go through awscrt, while listing,
deletes, multipart uploads, copies and tagging stay on boto3 (:class:`S3Store`).

Semantics are the same as :class:`S3Store`: create-only PUT (``If-None-Match: *``, 412
means already present), s3kv's checksum in metadata plus S3's checksum header, tags in
``x-amz-tagging``; GET lands each received chunk straight in the caller's buffer, after
the size was checked against the response headers.

Request shapes, chosen by measurement on Ceph RGW and moto (bench/): a block PUT is
awscrt's single-part PUT_OBJECT (unsigned payload; a plain request measured no better on
RGW and worse on moto for 1 MiB); a block GET up to :data:`SINGLE_GET_BYTES` is one plain
GET without a ``Range`` header, larger ones use awscrt's GET_OBJECT with its pooled part
buffer.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlsplit

from awscrt import auth, http, s3
from awscrt import io as crt_io
from awscrt.exceptions import AwsCrtError
from botocore.credentials import RefreshableCredentials

from s3kv.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ObjectNotFoundError,
    SizeMismatchError,
    StoreError,
    TransientStoreError,
)
from s3kv.integrity import METADATA_KEY, Buffer, Checksum
from s3kv.settings import S3Settings
from s3kv.stores.base import ObjectInfo, PutOptions
from s3kv.stores.errors import TIMEOUT_HINT, no_answer
from s3kv.stores.s3 import S3Store
from s3kv.stores.trace import trace, trace_enabled

_META_HEADER = f"x-amz-meta-{METADATA_KEY}"

GET_PART_BYTES = 8 * 1024 * 1024
"""awscrt's part size: its buffer pool holds one per request in flight."""

SINGLE_GET_BYTES = 128 * 1024
"""Blocks up to this size are read with one plain GET. awscrt's GET_OBJECT asks for its
first part with a ``Range`` header, and Ceph RGW answers a ranged GET of a 64 KiB
object with about 10% more CPU than a plain one (bench/bench_rgw.py); above this
size GET_OBJECT's pooled part buffer costs the client less than a plain GET's body,
which arrives in many Python callbacks: 256 KiB blocks into rows on RGW 16 over HTTP,
client CPU 1.8-2.0 s/GiB with GET_OBJECT against 2.3-3.1 with a plain GET (64 KiB: no
difference measured)."""

PutDone = Callable[[bool | None, BaseException | None], None]
_FLOOR_BYTES_PER_SECOND = 1024 * 1024
# awscrt's names for a connection that opened and then never (or too slowly) answered.
_STALLED = frozenset(
    {
        "AWS_ERROR_HTTP_CHANNEL_THROUGHPUT_FAILURE",
        "AWS_IO_SOCKET_TIMEOUT",
        "AWS_ERROR_HTTP_RESPONSE_FIRST_BYTE_TIMEOUT",
        "AWS_ERROR_HTTP_CONNECTION_CLOSED",
        "AWS_IO_TLS_NEGOTIATION_TIMEOUT",
    }
)
GetDone = Callable[[ObjectInfo | None, BaseException | None], None]
_CHECKSUM_HEADERS = {
    "crc32c": "x-amz-checksum-crc32c",
    "crc32": "x-amz-checksum-crc32",
    "sha256": "x-amz-checksum-sha256",
}


class _Reader(io.RawIOBase):
    """The request body: the caller's buffer, read by awscrt in chunks."""

    def __init__(self, view: memoryview) -> None:
        self.view, self.pos = view, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self.view) - self.pos)
        buffer[:n] = self.view[self.pos : self.pos + n]
        self.pos += n
        return n


class CrtS3Store(S3Store):
    """:class:`S3Store` with block PUT, GET and HEAD on awscrt's S3 client."""

    def __init__(self, bucket: str, settings: S3Settings, *, client: Any = None) -> None:
        super().__init__(bucket, settings, client=client)
        credentials = self.client._request_signer._credentials
        region = settings.region or self.client.meta.region_name or "us-east-1"
        endpoint = settings.endpoint_url or f"https://s3.{region}.amazonaws.com"
        parts = urlsplit(endpoint)
        tls = parts.scheme == "https"
        self._url = endpoint  # named in errors
        if (
            settings.endpoint_url is None
            and settings.resolved_addressing_style != "path"
            and ("." not in bucket)
        ):
            self._host, self._path = f"{bucket}.{parts.netloc}", ""
        else:
            self._host, self._path = parts.netloc, f"/{quote(bucket)}"
        elg = crt_io.EventLoopGroup(0)
        bootstrap = crt_io.ClientBootstrap(elg, crt_io.DefaultHostResolver(elg))
        kwargs: dict[str, Any] = {}
        if tls:
            options = crt_io.TlsContextOptions()
            if settings.ca_bundle is not None:
                options.override_default_trust_store_from_path(ca_filepath=str(settings.ca_bundle))
            options.verify_peer = settings.verify_tls
            connection = crt_io.ClientTlsContext(options).new_connection_options()
            connection.set_server_name(parts.hostname or self._host)
            kwargs["tls_connection_options"] = connection
        self._crt = s3.S3Client(
            bootstrap=bootstrap,
            region=region,
            tls_mode=s3.S3RequestTlsMode.ENABLED if tls else s3.S3RequestTlsMode.DISABLED,
            credential_provider=_provider(credentials),
            # GETs of blocks up to part_size arrive in one piece (one Python callback, one
            # copy into the caller's buffer). PUTs stay single-part: larger objects go to
            # boto3's multipart path.
            part_size=GET_PART_BYTES,
            multipart_upload_threshold=settings.multipart_threshold_bytes + 1,
            max_active_connections_override=settings.concurrency,
            # One quick retry inside awscrt; s3kv.retry owns backoff and the deadline.
            retry_config=s3.S3RetryConfig(max_retries=1, backoff_scale_factor_ms=5),
            connect_timeout_ms=int(settings.connect_timeout_seconds * 1000),
            **kwargs,
        )
        self._trace = trace_enabled()

    def _target(self, key: str) -> str:
        return f"{self._path}/{quote(key, safe='/~')}"

    def _start(
        self,
        method: str,
        key: str,
        operation: str,
        *,
        headers: list[tuple[str, str]] | None = None,
        body: memoryview | None = None,
        on_headers: Callable[..., None] | None = None,
        on_body: Callable[..., None] | None = None,
        kind: Any = s3.S3RequestType.DEFAULT,
    ) -> Future[None]:
        """Start a request; its future fails with awscrt's error (see :func:`_error`)."""
        fields = [("Host", self._host), *(headers or [])]
        if body is not None:
            fields.append(("Content-Length", str(len(body))))
        request = http.HttpRequest(
            method, self._target(key), http.HttpHeaders(fields), _Reader(body) if body else None
        )
        meta = self._crt.make_request(
            type=kind,
            request=request,
            operation_name=operation if kind == s3.S3RequestType.DEFAULT else None,
            on_headers=on_headers,
            on_body=on_body,
        )
        future: Future[None] = meta.finished_future
        return future

    def _request(self, method: str, key: str, operation: str, **kwargs: Any) -> None:
        # awscrt has no read timeout of its own: bound the wait by the configured timeouts,
        # plus the body's time at a floor of 1 MiB/s (a large PUT on a slow link).
        body = kwargs.get("body")
        wait = (
            self.settings.connect_timeout_seconds
            + self.settings.read_timeout_seconds
            + (len(body) / _FLOOR_BYTES_PER_SECOND if body is not None else 0.0)
        )
        try:
            future = self._start(method, key, operation, **kwargs)
            future.result(wait)
        except TimeoutError as exc:
            raise no_answer(method, self._where(key), self._url, wait) from exc
        except Exception as exc:
            raise _error(exc, method, self._where(key), self._url) from exc

    # -- blocks -------------------------------------------------------------------------

    def put(self, key: str, data: Buffer, options: PutOptions) -> bool:
        view = memoryview(data).cast("B")
        if not self.can_submit(len(view)):
            return super().put(key, view, options)
        try:
            self._request("PUT", key, "PutObject", **self._put_request(key, view, options))
        except _AlreadyExists:
            return False
        return True

    def can_submit(self, size: int) -> bool:
        """Whether a block of ``size`` bytes goes through awscrt (single-part, non-empty)."""
        return 0 < size < self.settings.multipart_threshold_bytes

    def submit_put(self, key: str, data: memoryview, options: PutOptions, done: PutDone) -> None:
        """Start a create-only PUT; ``done(created, None)`` or ``done(None, error)`` later,
        from an awscrt thread. Only for sizes :meth:`can_submit` accepts."""
        where = self._where(key)
        future = self._start("PUT", key, "PutObject", **self._put_request(key, data, options))

        def finished(f: Future[None]) -> None:
            exc = f.exception()
            if exc is None:
                done(True, None)
                return
            err = _error(exc, "PUT", where, self._url)
            if isinstance(err, _AlreadyExists):
                done(False, None)
            else:
                done(None, err)

        future.add_done_callback(finished)

    def _put_request(self, key: str, view: memoryview, options: PutOptions) -> dict[str, Any]:
        headers: list[tuple[str, str]] = []
        if options.create_only:
            headers.append(("If-None-Match", "*"))
        if options.if_match is not None:
            headers.append(("If-Match", options.if_match))
        if options.checksum is not None:
            headers.append((_META_HEADER, options.checksum.header()))
            headers.append((_CHECKSUM_HEADERS[options.checksum.algorithm], options.checksum.value))
        tagging = self._tagging(options)
        if tagging:
            headers.append(("x-amz-tagging", tagging))
        if self._trace:
            record: dict[str, Any] = {"op": "PutObject", "bucket": self.bucket, "key": key}
            if tagging:
                record["tags"] = dict(options.tags)
            trace({**record, "size": len(view)})
        # PUT_OBJECT signs with an unsigned payload (DEFAULT would sha256 the body);
        # s3kv's own checksum header covers the bytes.
        return {"headers": headers, "body": view, "kind": s3.S3RequestType.PUT_OBJECT}

    def get_into(self, key: str, buffer: memoryview) -> ObjectInfo:
        answer, callbacks = self._into(key, buffer)
        self._request("GET", key, "GetObject", **callbacks)
        return answer.check(len(buffer), self._where(key))

    def submit_get_into(self, key: str, buffer: memoryview, done: GetDone) -> None:
        """Start a GET into ``buffer``; ``done(info, None)`` or ``done(None, error)`` later,
        from an awscrt thread (size checked first, as :meth:`get_into`)."""
        where = self._where(key)
        answer, callbacks = self._into(key, buffer)
        future = self._start("GET", key, "GetObject", **callbacks)

        def finished(f: Future[None]) -> None:
            exc = f.exception()
            if exc is not None:
                done(None, _error(exc, "GET", where, self._url))
                return
            try:
                info = answer.check(len(buffer), where)
            except (StoreError, SizeMismatchError) as err:
                done(None, err)
                return
            done(info, None)

        future.add_done_callback(finished)

    def _into(self, key: str, buffer: memoryview) -> tuple[_Answer, dict[str, Any]]:
        if self._trace:
            trace({"op": "GetObject", "bucket": self.bucket, "key": key})
        answer = _Answer(key)

        def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
            answer.read(status_code, headers)
            if status_code < 300 and answer.size != len(buffer):
                answer.wrong_size = True

        def on_body(chunk: bytes, offset: int, **_: Any) -> None:
            if not answer.wrong_size:
                buffer[offset : offset + len(chunk)] = chunk
                answer.received += len(chunk)

        small = len(buffer) <= SINGLE_GET_BYTES
        return answer, {
            "on_headers": on_headers,
            "on_body": on_body,
            "kind": s3.S3RequestType.DEFAULT if small else s3.S3RequestType.GET_OBJECT,
        }

    def get(self, key: str) -> tuple[bytes, ObjectInfo]:
        if self._trace:
            trace({"op": "GetObject", "bucket": self.bucket, "key": key})
        answer = _Answer(key)
        chunks: list[bytes] = []

        def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
            answer.read(status_code, headers)

        def on_body(chunk: bytes, offset: int, **_: Any) -> None:
            chunks.append(chunk)

        try:
            self._request(
                "GET",
                key,
                "GetObject",
                on_headers=on_headers,
                on_body=on_body,
                kind=s3.S3RequestType.GET_OBJECT,
            )
        except _EmptyObject:
            return b"", ObjectInfo(key=key, size=0)  # its callers judge an empty object
        data = b"".join(chunks)
        if len(data) != answer.size:
            raise TransientStoreError(
                f"GET {self._where(key)}: connection closed after {len(data)} of "
                f"{answer.size} bytes"
            )
        return data, answer.info()

    def head(self, key: str) -> ObjectInfo | None:
        if self._trace:
            trace({"op": "HeadObject", "bucket": self.bucket, "key": key})
        answer = _Answer(key)

        def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
            answer.read(status_code, headers)

        try:
            self._request("HEAD", key, "HeadObject", on_headers=on_headers)
        except ObjectNotFoundError:
            return None
        return answer.info()

    def _tagging(self, options: PutOptions) -> str:
        if not options.tags or not self.settings.tag_blocks:
            return ""
        return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in options.tags.items())


class _AlreadyExists(StoreError):
    """412 on a create-only PUT (internal: put returns False)."""


class _EmptyObject(StoreError):
    """416 on a GET_OBJECT: its ranged first part found a 0-byte object (Ceph RGW)."""


class _Answer:
    def __init__(self, key: str) -> None:
        self.key = key
        self.size = -1
        self.received = 0
        self.wrong_size = False
        self.checksum: Checksum | None = None
        self.etag: str | None = None
        self.last_modified: datetime | None = None

    def read(self, status_code: int, headers: list[tuple[str, str]]) -> None:
        if status_code >= 300:
            return
        for name, value in headers:
            lower = name.lower()
            if lower == "content-length" and self.size < 0:
                self.size = int(value)
            elif lower == "content-range":  # a ranged first part: "bytes 0-N/total"
                self.size = int(value.rsplit("/", 1)[1])
            elif lower == _META_HEADER:
                self.checksum = Checksum.parse(value)
            elif lower == "etag":
                self.etag = value
            elif lower == "last-modified":  # what renewal compares against (s3kv.renewal)
                try:
                    self.last_modified = parsedate_to_datetime(value)
                except (TypeError, ValueError):
                    pass

    def info(self) -> ObjectInfo:
        return ObjectInfo(
            key=self.key,
            size=self.size,
            last_modified=self.last_modified,
            checksum=self.checksum,
            etag=self.etag,
        )

    def check(self, expected: int, where: str) -> ObjectInfo:
        """The object's info once a GET into an ``expected``-byte buffer finished."""
        if self.wrong_size:
            raise SizeMismatchError(
                f"GET {where}: object is {self.size} bytes, expected {expected} "
                "(a truncated or foreign object, or a buffer of the wrong size)"
            )
        if self.received != expected:
            raise TransientStoreError(
                f"GET {where}: connection closed after {self.received} of {expected} bytes"
            )
        return self.info()


def _provider(credentials: Any) -> auth.AwsCredentialsProvider:
    """The credentials boto3's chain found, for awscrt's signer.

    Static ones (keys, environment, profile files) are handed over once: a delegate would
    call into Python, under the GIL, for every request signed. Refreshable ones (roles,
    SSO) go through a delegate so boto3 keeps refreshing them.
    """
    if credentials is None:
        raise AccessDeniedError(
            "no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "or pick a profile with --profile/AWS_PROFILE"
        )
    if not isinstance(credentials, RefreshableCredentials):
        frozen = credentials.get_frozen_credentials()
        return auth.AwsCredentialsProvider.new_static(
            frozen.access_key, frozen.secret_key, frozen.token
        )
    lock = threading.Lock()

    def get() -> auth.AwsCredentials:
        with lock:
            frozen = credentials.get_frozen_credentials()
        return auth.AwsCredentials(frozen.access_key, frozen.secret_key, frozen.token)

    return auth.AwsCredentialsProvider.new_delegate(get)


def _error(exc: BaseException, method: str, where: str, endpoint: str) -> BaseException:
    """An s3kv error for what awscrt raised (anything else is returned as it is)."""
    if isinstance(exc, s3.S3ResponseError):
        return _translate(exc, method, where)
    if isinstance(exc, AwsCrtError):
        if exc.name in _STALLED:
            return TransientStoreError(
                f"{method} {where}: no answer from {endpoint} (the connection stalled or "
                f"timed out: {exc.name}); {TIMEOUT_HINT}"
            )
        return TransientStoreError(f"{method} {where}: {endpoint}: {exc.name}: {exc.message}")
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return TransientStoreError(f"{method} {where}: {endpoint}: {exc}")
    return exc


def _translate(exc: s3.S3ResponseError, method: str, where: str) -> StoreError:
    status = int(exc.status_code)
    body = exc.body or b""
    code = _error_code(body)
    if status == 412:
        return _AlreadyExists(f"{method} {where}: already exists")
    if status == 416 and method == "GET":
        return _EmptyObject(f"{method} {where}: the object is 0 bytes")
    if status == 404:
        if code == "NoSuchBucket":
            return BucketNotFoundError(
                f"{method} {where}: the bucket does not exist; create it first "
                "(see terraform/) or check the bucket name and --endpoint-url"
            )
        return ObjectNotFoundError(f"{method} {where}: no such object")
    if status == 403:
        return AccessDeniedError(
            f"{method} {where}: access denied ({code or 403}); check the credentials and that "
            "their policy grants this operation (terraform/ has writer and reader policies)"
        )
    if status in (409, 429) or status >= 500 or code in ("SlowDown", "RequestTimeout"):
        return TransientStoreError(f"{method} {where}: {code or status}: HTTP {status}")
    return StoreError(f"{method} {where}: {code or 'HTTP ' + str(status)}")


def _error_code(body: bytes) -> str:
    start = body.find(b"<Code>")
    end = body.find(b"</Code>")
    if start < 0 or end < start:
        return ""
    return body[start + 6 : end].decode("utf-8", "replace")
