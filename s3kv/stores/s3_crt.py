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
RGW and worse on moto for 1 MiB); a block GET up to :data:`SINGLE_GET_BYTES` is one
request of its own, ranged to one byte past the block (awscrt hands such a request's
headers over only once the whole body is in: without the range, an oversized object
under a block key would be read whole first); larger ones up to :data:`DIRECT_BYTES`
use awscrt's GET_OBJECT with its pooled part buffer, cancelled as soon as its first
part's headers show the size; from there on :mod:`.direct_get` reads them.

Every request has a read timeout (:mod:`.watchdog`: no progress for connect + read
seconds cancels it, which closes its connection) and can be cancelled by its job; once
it ended, nothing more lands in the caller's buffer (``on_body`` writes under a gate).
The endpoint, host and path come from boto3's resolution (:mod:`.endpoint`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any
from urllib.parse import quote

from awscrt import auth, http, s3
from awscrt import io as crt_io
from botocore.credentials import RefreshableCredentials

from s3kv.errors import (
    AccessDeniedError,
    ObjectNotFoundError,
    SizeMismatchError,
    StoreError,
    TransferCancelledError,
    TransientStoreError,
)
from s3kv.integrity import Buffer
from s3kv.settings import S3Settings
from s3kv.stores.answers import oversized
from s3kv.stores.base import Cancel, ObjectInfo, PutOptions
from s3kv.stores.crt_request import (
    CHECKSUM_HEADERS,
    META_HEADER,
    WRITE_ID_HEADER,
    AlreadyExists,
    Answer,
    BodyReader,
    Call,
    EmptyObject,
    crt_error,
)
from s3kv.stores.direct import Direct
from s3kv.stores.endpoint import data_endpoint
from s3kv.stores.errors import no_answer
from s3kv.stores.s3 import S3Store
from s3kv.stores.trace import trace, trace_enabled
from s3kv.stores.watchdog import Watchdog

GET_PART_BYTES = 8 * 1024 * 1024
"""awscrt's part size: its buffer pool holds one per request in flight."""

SINGLE_GET_BYTES = 128 * 1024
"""Blocks up to this size are read with one request of their own, ranged to one byte
past the block. It was a plain GET, which Ceph RGW answers with about 10% less CPU
than a ranged one at 64 KiB (bench/bench_rgw.py); but awscrt hands such a request's
headers over only once the whole body is in, so a plain GET read an oversized object
under a block key whole before its size could be refused (issue 19). Above this size
GET_OBJECT's pooled part buffer costs the client less than a single request's body,
which arrives in many Python callbacks: 256 KiB blocks into rows on RGW 16 over HTTP,
client CPU 1.8-2.0 s/GiB with GET_OBJECT against 2.3-3.1 with a plain GET (64 KiB: no
difference measured)."""

DIRECT_BYTES = 1024 * 1024
"""Blocks from this size up are written and read by :mod:`.direct` (the kernel moves the
body to and from the caller's buffer) rather than awscrt (which copies it two or three
times in user space, on its event-loop threads): the per-byte work dominates there, and
a block that large is worth a signed request built in Python."""

_LIVE_PRUNE_AT = 1024
"""Shutdown events of requests kept before the set is pruned of those already set."""
PutDone = Callable[[bool | None, BaseException | None], None]
_FLOOR_BYTES_PER_SECOND = 1024 * 1024
"""A PUT's body is sent with no progress awscrt reports: its read timeout starts after
the time the body takes at this floor rate (1 MiB/s)."""
GetDone = Callable[[ObjectInfo | None, BaseException | None], None]


class CrtS3Store(S3Store):
    """:class:`S3Store` with block PUT, GET and HEAD on awscrt's S3 client."""

    retries_itself = True  # one quick retry of its own (see retry_config below)

    def __init__(self, bucket: str, settings: S3Settings, *, client: Any = None) -> None:
        super().__init__(bucket, settings, client=client)
        provider = _provider(self.client._request_signer._credentials)
        # Exactly where boto3 sends this bucket's requests (profile, services section,
        # partition, FIPS, dual-stack, a path in the endpoint URL, addressing style).
        target = data_endpoint(self.client, bucket)
        self._url = target.url  # named in errors
        self._host, self._path = target.host, target.path
        elg = crt_io.EventLoopGroup(0)
        bootstrap = crt_io.ClientBootstrap(elg, crt_io.DefaultHostResolver(elg))
        kwargs: dict[str, Any] = {}
        if target.tls:
            options = crt_io.TlsContextOptions()
            if settings.ca_bundle is not None:
                options.override_default_trust_store_from_path(ca_filepath=str(settings.ca_bundle))
            options.verify_peer = settings.verify_tls
            connection = crt_io.ClientTlsContext(options).new_connection_options()
            connection.set_server_name(target.hostname)
            kwargs["tls_connection_options"] = connection
        self._crt = s3.S3Client(
            bootstrap=bootstrap,
            region=target.region,
            tls_mode=s3.S3RequestTlsMode.ENABLED if target.tls else s3.S3RequestTlsMode.DISABLED,
            credential_provider=provider,
            # GETs of blocks up to part_size arrive in one piece (one Python callback, one
            # copy into the caller's buffer). PUTs stay single-part: larger objects go to
            # boto3's multipart path.
            part_size=GET_PART_BYTES,
            multipart_upload_threshold=settings.multipart_threshold_bytes + 1,
            max_active_connections_override=settings.concurrency,
            # s3kv.retry owns attempts, backoff, Retry-After and the deadline. awscrt
            # cannot be told to never retry (0 means its default, 5), so its retry bucket
            # holds one token: at most one quick retry, refilled only by a success, and
            # none at all while every request fails. (awscrt retries 500 and 503 itself
            # and then reports them without the response: their Retry-After is lost on
            # this path; 429, 502 and 504 come back with it.)
            retry_config=s3.S3RetryConfig(
                max_retries=1, backoff_scale_factor_ms=5, initial_bucket_capacity=1
            ),
            connect_timeout_ms=int(settings.connect_timeout_seconds * 1000),
            **kwargs,
        )
        # No progress for connect + read seconds: cancelled (awscrt has no read timeout).
        self._timeout = settings.connect_timeout_seconds + settings.read_timeout_seconds
        self._watchdog = Watchdog(self._timeout)
        self._trace = trace_enabled()
        # Blocks from DIRECT_BYTES up: moved by the kernel to and from the caller's buffer.
        self._direct = Direct(
            target,
            self.client._request_signer._credentials,
            settings,
            connections=settings.concurrency,
        )
        # Requests awscrt has not let go of yet (see quiesce), pruned as they go.
        self._live: set[threading.Event] = set()
        self._live_lock = threading.Lock()

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
        call: Call | None = None,
    ) -> tuple[Call, Future[None]]:
        """Start a request under the watchdog; its future fails with awscrt's error (see
        :meth:`_failure`)."""
        if call is None:
            call = Call()
        fields = [("Host", self._host), *(headers or [])]
        if body is not None:
            fields.append(("Content-Length", str(len(body))))
            call.last += len(body) / _FLOOR_BYTES_PER_SECOND
        request = http.HttpRequest(
            method, self._target(key), http.HttpHeaders(fields), BodyReader(body) if body else None
        )
        self._watchdog.watch(call)
        try:
            meta = self._crt.make_request(
                type=kind,
                request=request,
                operation_name=operation if kind == s3.S3RequestType.DEFAULT else None,
                on_headers=on_headers,
                on_body=on_body,
            )
        except BaseException:
            self._watchdog.forget(call)
            raise
        call.started(meta)
        with self._live_lock:
            if len(self._live) >= _LIVE_PRUNE_AT:
                self._live = {e for e in self._live if not e.is_set()}
            self._live.add(meta.shutdown_event)
        future: Future[None] = meta.finished_future
        return call, future

    def quiesce(self, timeout: float) -> bool:
        """Wait for awscrt to release every request it was given: it reports a request
        finished before it drops the request's callbacks, which reach the caller's
        buffer (vLLM unmaps its rows right after the tier's shutdown)."""
        deadline = time.monotonic() + timeout
        with self._live_lock:
            live, self._live = self._live, set()
        pending = [e for e in live if not e.is_set()]
        for event in pending:
            if not event.wait(max(0.0, deadline - time.monotonic())):
                with self._live_lock:
                    self._live.update(e for e in pending if not e.is_set())
                return False
        return True

    def _failure(self, exc: BaseException, call: Call, method: str, where: str) -> BaseException:
        """The s3kv error for a request that failed, or was stopped by s3kv."""
        if call.reason == "stalled":
            return no_answer(method, where, self._url, self._timeout)
        if call.reason == "cancelled":
            return TransferCancelledError(f"{method} {where}: cancelled")
        if call.reason == "refused" and call.problem is not None:
            return call.problem
        return crt_error(exc, method, where, self._url)

    def _ended(self, call: Call) -> None:
        call.finish()
        self._watchdog.forget(call)

    def _request(self, method: str, key: str, operation: str, **kwargs: Any) -> Call:
        # The watchdog bounds the wait; the timeout here is a safety net only.
        body = kwargs.get("body")
        where = self._where(key)
        call, future = self._start(method, key, operation, **kwargs)
        try:
            future.result(2 * self._timeout + 5 + (len(body) if body else 0) / 2**20)
        except TimeoutError:
            call.stop("stalled")
            raise no_answer(method, where, self._url, self._timeout) from None
        except Exception as exc:
            raise self._failure(exc, call, method, where) from exc
        finally:
            self._ended(call)
        return call

    # -- blocks -------------------------------------------------------------------------

    def put(self, key: str, data: Buffer, options: PutOptions) -> bool:
        view = memoryview(data).cast("B")
        if not self.can_submit(len(view)):
            return super().put(key, view, options)
        if len(view) >= DIRECT_BYTES:
            created: bool = self._wait(lambda done: self.submit_put(key, view, options, done))
            return created
        answer, request = self._put_request(key, view, options)
        try:
            self._request("PUT", key, "PutObject", **request)
        except AlreadyExists:
            return False
        answer.stored(self._where(key), self._url, options)
        return True

    def can_submit(self, size: int) -> bool:
        """Whether a block of ``size`` bytes goes through awscrt (single-part, non-empty)."""
        return 0 < size < self.settings.multipart_threshold_bytes

    def submit_put(
        self, key: str, data: memoryview, options: PutOptions, done: PutDone
    ) -> Cancel:
        """Start a create-only PUT; ``done(created, None)`` or ``done(None, error)`` later,
        from another thread. Only for sizes :meth:`can_submit` accepts; from
        :data:`DIRECT_BYTES` up on :mod:`.direct`. Returns a function that cancels the
        request."""
        where = self._where(key)
        if len(data) >= DIRECT_BYTES:
            headers = self._put_headers(key, data, options)
            return self._direct.submit_put(key, where, data, headers, options, done)
        answer, request = self._put_request(key, data, options)
        call, future = self._start("PUT", key, "PutObject", **request)

        def finished(f: Future[None]) -> None:
            self._ended(call)
            exc = f.exception()
            if exc is None:
                try:
                    answer.stored(where, self._url, options)
                except StoreError as refused:
                    done(None, refused)
                    return
                done(True, None)
                return
            err = self._failure(exc, call, "PUT", where)
            if isinstance(err, AlreadyExists):
                done(False, None)
            else:
                done(None, err)

        future.add_done_callback(finished)
        return call.cancel

    def _put_request(
        self, key: str, view: memoryview, options: PutOptions
    ) -> tuple[Answer, dict[str, Any]]:
        headers = self._put_headers(key, view, options)
        answer = Answer(key)

        def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
            answer.read(status_code, headers, keep=True)

        # PUT_OBJECT signs with an unsigned payload (DEFAULT would sha256 the body);
        # s3kv's own checksum header covers the bytes.
        return answer, {
            "headers": headers,
            "body": view,
            "kind": s3.S3RequestType.PUT_OBJECT,
            "on_headers": on_headers,
        }

    def _put_headers(
        self, key: str, view: memoryview, options: PutOptions
    ) -> list[tuple[str, str]]:
        """A block PUT's headers: its conditions, checksums, write token and tags."""
        headers: list[tuple[str, str]] = []
        if options.create_only:
            headers.append(("If-None-Match", "*"))
        if options.if_match is not None:
            headers.append(("If-Match", options.if_match))
        if options.checksum is not None:
            headers.append((META_HEADER, options.checksum.header()))
            headers.append((CHECKSUM_HEADERS[options.checksum.algorithm], options.checksum.value))
        if options.write_id is not None:
            headers.append((WRITE_ID_HEADER, options.write_id))
        headers.extend((f"x-amz-meta-{k}", v) for k, v in options.metadata.items())
        tagging = self._tagging(options)
        if tagging:
            headers.append(("x-amz-tagging", tagging))
        if self._trace:
            record: dict[str, Any] = {"op": "PutObject", "bucket": self.bucket, "key": key}
            if tagging:
                record["tags"] = dict(options.tags)
            trace({**record, "size": len(view)})
        return headers

    def get_into(self, key: str, buffer: memoryview) -> ObjectInfo:
        if len(buffer) >= DIRECT_BYTES:
            info: ObjectInfo = self._wait(
                lambda done: self.submit_get_into(key, buffer, done)
            )
            return info
        answer, callbacks = self._into(key, buffer)
        try:
            self._request("GET", key, "GetObject", **callbacks)
        except EmptyObject:
            answer.size, answer.wrong_size = 0, True
        return answer.check(len(buffer), self._where(key))

    def plan_loads(self, count: int, size: int, window: int) -> tuple[int, int]:
        if size >= DIRECT_BYTES:
            return self._direct.plan(count, size, window)
        return 1, window

    def submit_get_into(
        self, key: str, buffer: memoryview, done: GetDone, *, parts: int = 1
    ) -> Cancel:
        """Start a GET into ``buffer``; ``done(info, None)`` or ``done(None, error)`` later,
        from another thread (size checked first, as :meth:`get_into`). Returns a function
        that cancels the request; once the request ended, nothing lands in ``buffer``.
        Blocks from :data:`DIRECT_BYTES` up go to :mod:`.direct` (in ``parts``
        ranged parts at once), smaller ones to awscrt."""
        where = self._where(key)
        if len(buffer) >= DIRECT_BYTES:
            if self._trace:
                trace({"op": "GetObject", "bucket": self.bucket, "key": key})
            return self._direct.submit_get(key, where, buffer, done, parts=parts)
        answer, callbacks = self._into(key, buffer)
        call, future = self._start("GET", key, "GetObject", **callbacks)

        def finished(f: Future[None]) -> None:
            self._ended(call)
            exc = f.exception()
            if exc is not None:
                err = self._failure(exc, call, "GET", where)
                if not isinstance(err, EmptyObject):
                    done(None, err)
                    return
                answer.size, answer.wrong_size = 0, True  # a range of 0 bytes: 416
            try:
                info = answer.check(len(buffer), where)
            except (StoreError, SizeMismatchError) as err:
                done(None, err)
                return
            done(info, None)

        future.add_done_callback(finished)
        return call.cancel

    @staticmethod
    def _wait(submit: Callable[[Callable[[Any, BaseException | None], None]], Cancel]) -> Any:
        """Run a submitted request to its end: its result, or its error raised."""
        finished = threading.Event()
        outcome: list[Any] = [None, None]

        def done(result: Any, error: BaseException | None) -> None:
            outcome[:] = [result, error]
            finished.set()

        cancel = submit(done)
        try:
            finished.wait()
        except BaseException:
            cancel()  # Ctrl-C: the request stops, and done runs once it left the buffer
            finished.wait()
            raise
        result, error = outcome
        if error is not None:
            raise error
        return result

    def _into(self, key: str, buffer: memoryview) -> tuple[Answer, dict[str, Any]]:
        if self._trace:
            trace({"op": "GetObject", "bucket": self.bucket, "key": key})
        answer = Answer(key)
        call = Call()
        where, url, expected = self._where(key), self._url, len(buffer)
        gate = call.gate

        def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
            call.last = time.monotonic()
            answer.read(status_code, headers)
            if status_code < 300:
                problem: BaseException | None = answer.foreign(where, url)
                if problem is None and answer.size != expected:
                    answer.wrong_size = True
                    problem = answer.size_mismatch(expected, where)
                if problem is not None:  # read no further
                    call.stop("refused", problem)

        def on_body(chunk: bytes, offset: int, **_: Any) -> None:
            with gate:
                if call.open:
                    buffer[offset : offset + len(chunk)] = chunk
                    answer.received += len(chunk)
            call.last = time.monotonic()

        if len(buffer) <= SINGLE_GET_BYTES:
            # One byte more than the block: a larger object shows in Content-Range.
            return answer, {
                "headers": [("Range", f"bytes=0-{expected}")],
                "on_headers": on_headers,
                "on_body": on_body,
                "kind": s3.S3RequestType.DEFAULT,
                "call": call,
            }
        return answer, {
            "on_headers": on_headers,
            "on_body": on_body,
            "kind": s3.S3RequestType.GET_OBJECT,
            "call": call,
        }

    def get(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
        if self._trace:
            trace({"op": "GetObject", "bucket": self.bucket, "key": key})
        where = self._where(key)
        answer = Answer(key)
        chunks: list[bytes] = []
        call = Call()

        def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
            call.last = time.monotonic()
            answer.read(status_code, headers)
            if status_code < 300:
                problem: BaseException | None = answer.foreign(where, self._url)
                if problem is None and max_bytes is not None and answer.size > max_bytes:
                    problem = oversized(where, answer.size, max_bytes)
                if problem is not None:  # read no further
                    call.stop("refused", problem)

        def on_body(chunk: bytes, offset: int, **_: Any) -> None:
            chunks.append(chunk)
            call.last = time.monotonic()

        try:
            self._request(
                "GET",
                key,
                "GetObject",
                on_headers=on_headers,
                on_body=on_body,
                kind=s3.S3RequestType.GET_OBJECT,
                call=call,
            )
        except EmptyObject:
            return b"", ObjectInfo(key=key, size=0)  # its callers judge an empty object
        data = b"".join(chunks)
        if len(data) != answer.size:
            raise TransientStoreError(
                f"GET {where}: connection closed after {len(data)} of {answer.size} bytes"
            )
        return data, answer.info()

    def head(self, key: str) -> ObjectInfo | None:
        if self._trace:
            trace({"op": "HeadObject", "bucket": self.bucket, "key": key})
        answer = Answer(key)
        where = self._where(key)

        def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
            answer.read(status_code, headers)

        try:
            self._request("HEAD", key, "HeadObject", on_headers=on_headers)
        except ObjectNotFoundError:
            return None
        problem = answer.foreign(where, self._url, "HEAD")
        if problem is not None:
            raise problem
        return answer.info()

    def _tagging(self, options: PutOptions) -> str:
        if not options.tags or not self.settings.tag_blocks:
            return ""
        return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in options.tags.items())

    def close(self) -> None:
        self._direct.close()
        self._watchdog.close()
        super().close()


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


