"""Block data on awscrt's native S3 client: every block GET, PUT and HEAD, at every size.

Why awscrt: it is the AWS Common Runtime (what s3transfer's CRT manager and the AWS CLI's
``crt`` transfer client use), written in C: connections, TLS (s2n), HTTP/1.1 framing and
SigV4 signing all run on its own event-loop threads, without the GIL, and Python is
called a bounded number of times per request (its headers, its body once per part, its
end). vLLM runs its offloading tiers inside EngineCore, next to the scheduler: a data
path that ran Python per network chunk or per TLS record would take the scheduler's time
(docs/benchmarks.md has the comparison that chose this client). boto3 keeps the control
plane (:class:`S3Store`: listings, deletes, copies, tags, multipart uploads).

Every request follows :mod:`.rules`: its answer must be S3's (an ETag, no web page), of
the block's size (checked from the headers before any byte is read), and the answer to
this very request (a GET's token echoed back, a PUT's checksum echoed where the store
echoes); it ends within :func:`.rules.attempt_seconds` (the :class:`Watchdog` cancels
it, which closes its connection) and can be cancelled by its job. Once a request ended,
nothing more lands in the caller's buffer. A block is read as one request per part
(:meth:`CrtS3Store.plan_loads`), each part one HTTP request straight into the block's
memory. awscrt honours ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` itself, as botocore
does (:mod:`.network`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any
from urllib.parse import quote

from awscrt import http, s3

from s3kv.errors import (
    ObjectNotFoundError,
    StoreError,
    TransientStoreError,
)
from s3kv.integrity import Buffer
from s3kv.settings import S3Settings
from s3kv.stores.base import Cancel, ObjectInfo, PutOptions
from s3kv.stores.crt_call import Answer, Body, Call, crt_failure
from s3kv.stores.crt_client import MAX_REQUEST_BYTES, credentials_provider, new_client
from s3kv.stores.crt_get import BlockGet, plan, small_get, submit_small_get
from s3kv.stores.crt_hidden import Hidden
from s3kv.stores.echoes import Echoes
from s3kv.stores.endpoint import DataEndpoint, data_endpoint
from s3kv.stores.errors import from_os_error
from s3kv.stores.hooks import reported, reporting_done
from s3kv.stores.memory import mapped
from s3kv.stores.rules import (
    ConditionFailed,
    RangeNotSatisfiable,
    attempt_seconds,
    cut_short,
    oversized,
    stale_answer,
)
from s3kv.stores.s3 import S3Store
from s3kv.stores.sse_c import key_headers, traced
from s3kv.stores.trace import trace, trace_enabled
from s3kv.stores.watchdog import Watchdog
from s3kv.stores.writing import write_headers

_LIVE_PRUNE_AT = 1024
"""Shutdown events of requests kept before the set is pruned of those already set."""

GetDone = Callable[[ObjectInfo | None, BaseException | None], None]
PutDone = Callable[[bool | None, BaseException | None], None]


class CrtS3Store(S3Store):
    """:class:`S3Store` with block PUT, GET and HEAD on awscrt's S3 client."""

    def __init__(self, bucket: str, settings: S3Settings, *, client: Any = None) -> None:
        super().__init__(bucket, settings, client=client)
        provider = credentials_provider(self.client._request_signer._credentials)
        # Exactly where boto3 sends this bucket's requests (profile, services section,
        # partition, FIPS, dual-stack, a path in the endpoint URL, addressing style).
        self.target: DataEndpoint = data_endpoint(self.client, bucket)
        self._provider = provider
        self._crt = new_client(self.target, settings, self.network.ca_bundle, provider)
        self._crt_lock = threading.Lock()
        self._renewed = 0.0
        self._calls = Watchdog(settings.connect_timeout_seconds + settings.read_timeout_seconds)
        self.echoes = Echoes(on_foreign=self._retire_connections)
        self._answered = False  # some request got an answer: TLS works
        self._hidden = Hidden(self)
        self._trace = trace_enabled()
        # Requests awscrt has not let go of yet (see quiesce), pruned as they go.
        self._live: set[threading.Event] = set()
        self._live_lock = threading.Lock()

    # -- one request --------------------------------------------------------------------

    def _retire_connections(self, carrier: object = None) -> None:
        """An answer that was another request's came on a kept-alive connection (a stale
        answer, a desynchronised proxy). awscrt hands a part's answer over only once it
        is in whole, so that connection looks healthy to it and would carry the leftover
        answer to the next request: new requests go to a new client (new connections),
        and the old one closes its connections once its requests in flight ended.
        ``carrier`` is the client that carried the request: once replaced, it is not
        replaced again (its other requests' findings), while a desync on the new client
        retires that one too."""
        with self._crt_lock:
            now = time.monotonic()
            if carrier is not None and carrier is not self._crt:
                return  # retired already
            if carrier is None and now - self._renewed < 0.5:  # one renewal retires them all
                return
            self._renewed = now
            self._crt = new_client(self.target, self.settings, self.network.ca_bundle,
                                self._provider)

    def start(
        self,
        method: str,
        key: str,
        call: Call,
        *,
        query: str = "",
        headers: list[tuple[str, str]] | None = None,
        body: memoryview | None = None,
        on_headers: Callable[..., None] | None = None,
        on_body: Callable[..., None] | None = None,
        kind: Any = s3.S3RequestType.DEFAULT,
        operation: str | None = None,
        part_bytes: int | None = None,
        send_filepath: str | None = None,
        recv_filepath: str | None = None,
    ) -> None:
        """Start one request under the watchdog; its end is reported through
        ``call.on_end`` (set before): awscrt's error, or None (see :meth:`failure`).
        ``send_filepath``: awscrt reads the body from that file (``body`` is then only
        its length); ``recv_filepath``: awscrt writes the body there, in C."""
        fields = [("Host", self.target.host), *(headers or [])]
        fields += key_headers(self.customer_keys, key)  # its tenant's key (SSE-C), if any
        if body is not None:
            fields.append(("Content-Length", str(len(body))))
        request = http.HttpRequest(
            method, self.request_path(key, query), http.HttpHeaders(fields),
            Body(body, call) if body is not None and send_filepath is None else None,
        )
        self._calls.watch(call)
        call.client = crt = self._crt
        call.file = send_filepath is not None or recv_filepath is not None
        try:
            meta = crt.make_request(
                type=kind,
                request=request,
                operation_name=operation if kind == s3.S3RequestType.DEFAULT else None,
                on_headers=on_headers,
                on_body=on_body,
                part_size=part_bytes,
                send_filepath=send_filepath,
                recv_filepath=recv_filepath,
                on_progress=(lambda _: call.moved()) if recv_filepath else None,
            )
        except BaseException:
            self._calls.forget(call)
            raise
        call.started(meta)
        with self._live_lock:
            if len(self._live) >= _LIVE_PRUNE_AT:
                self._live = {e for e in self._live if not e.is_set()}
            self._live.add(meta.shutdown_event)
        future: Future[None] = meta.finished_future

        def finished(f: Future[None]) -> None:
            call.finish()
            self._calls.forget(call)
            error = f.exception()
            if error is None or isinstance(error, s3.S3ResponseError):
                self._answered = True
            if error is None:
                self.pacer.succeeded()
            call.end(error)

        future.add_done_callback(finished)

    def request_path(self, key: str, query: str = "") -> str:
        """The request target of ``key``: the bucket's path (path-style) and the key."""
        return f"{self.target.path}/{quote(key, safe='/~')}" + (f"?{query}" if query else "")

    def failure(self, exc: BaseException | None, call: Call, method: str, where: str,
                nbytes: int = 0) -> BaseException:
        """The s3kv error for a request that failed, or that s3kv stopped."""
        unanswered = call.reason == "stalled" or (
            not call.reason and exc is not None and not isinstance(exc, s3.S3ResponseError)
        )
        if unanswered and self.target.tls and not self._answered:
            problem = self._hidden.tls_problem(method, where, where.removeprefix(f"{self.name}/"))
            if problem is not None:
                return problem
        error = crt_failure(
            exc, call, method, where, self.network, self.target.region,
            attempt_seconds(self.settings, nbytes),
        )
        key = where.removeprefix(f"{self.name}/")
        if method in ("GET", "PUT") and isinstance(error, ObjectNotFoundError):
            try:
                error.bound = self.echoes.check_missing(
                    method, where, key, error.named, call.client
                )
            except TransientStoreError as foreign:
                error = foreign
        if isinstance(error, TransientStoreError):
            self.pace(error)
            if error.throttled and error.retry_after is None and not isinstance(
                exc, s3.S3ResponseError
            ):
                self._hidden.ask_pace(key)
        return error

    # -- writes ---------------------------------------------------------------------------

    def can_submit(self, size: int) -> bool:
        """Every block below the multipart threshold is one awscrt request (larger
        objects are multipart uploads, :meth:`S3Store.put`)."""
        return 0 < size < self.settings.multipart_threshold_bytes

    def put(self, key: str, data: Buffer, options: PutOptions) -> bool:
        view = memoryview(data).cast("B")
        if not self.can_submit(len(view)):
            return super().put(key, view, options)
        created: bool = _wait_for(lambda done: self.submit_put(key, view, options, done))
        return created

    def put_from_path(self, key: str, path: str, size: int, options: PutOptions) -> bool:
        """The file's bytes read by awscrt in C (``send_filepath``); its pages mapped here
        only for what the answer is checked by (an MD5 where the store echoes nothing)."""
        with mapped(path, size) as view:
            if not self.can_submit(size):
                return super().put(key, view, options)
            created: bool = _wait_for(
                lambda done: self.submit_put(key, view, options, done, path=path)
            )
        return created

    def submit_put(self, key: str, data: memoryview, options: PutOptions, done: PutDone,
                   *, path: str | None = None) -> Cancel:
        """Start a PUT; ``done(created, None)`` or ``done(None, error)`` later, from
        another thread (``created`` False: create-only and the object existed). Only for
        sizes :meth:`can_submit` accepts. Returns a function that cancels the request.
        With ``path``, awscrt sends that file (``data``: its bytes, mapped)."""
        where = self._where(key)
        self.pacer.check("PUT", where)
        if self.on_request is not None:
            done = reporting_done(self.on_request, "put", key, data.nbytes, done)
        headers = write_headers(options, self.settings)
        if self._trace:
            self._trace_put(key, options, len(data))
        answer = Answer(key)
        nbytes = len(data)
        # The body goes out with no progress awscrt reports: its time is in the deadline.
        call = Call(attempt_seconds(self.settings, nbytes),
                    allowance=nbytes / self.settings.min_rate_bytes_per_second)

        checked: list[StoreError | None] = []
        md5 = self.echoes.md5_of(data)

        def check() -> None:
            # At the headers, before the connection carries another request: a copy of
            # this answer replayed to that request must find its ETag remembered.
            try:
                self.echoes.check_stored(
                    where, self.network.endpoint, etag=answer.etag, options=options,
                    echoed=answer.echoed, carrier=call.client, body=data, md5=md5,
                )
            except StoreError as refused:
                checked.append(refused)
            else:
                checked.append(None)

        def on_headers(status_code: int, headers: list[tuple[str, str]], **_: Any) -> None:
            if status_code < 300:
                answer.read(headers)
                check()

        def report(exc: BaseException | None) -> None:
            if exc is not None or call.reason:
                err = self.failure(exc, call, "PUT", where, nbytes)
                if isinstance(err, ObjectNotFoundError) and options.if_match is None:
                    # S3 answers a PUT without If-Match no NoSuchKey: another's answer
                    err = self.echoes.foreign(stale_answer("PUT", where, "404"), call.client)
                if isinstance(err, ConditionFailed):
                    done(False, None)
                else:
                    done(None, err)
                return
            if not checked:  # answered without headers reaching us: check what we have
                check()
            if checked[-1] is not None:
                done(None, checked[-1])
                return
            done(True, None)

        call.on_end(report)
        # PUT_OBJECT signs with an unsigned payload (DEFAULT would sha256 the body);
        # s3kv's checksum header covers the bytes.
        self.start(
            "PUT", key, call, headers=headers, body=data, on_headers=on_headers,
            kind=s3.S3RequestType.PUT_OBJECT, send_filepath=path,
        )
        return call.cancel

    def _trace_put(self, key: str, options: PutOptions, size: int) -> None:
        record: dict[str, Any] = {"op": "PutObject", "bucket": self.bucket, "key": key}
        if options.tags and self.settings.tag_blocks:
            record["tags"] = dict(options.tags)
        trace({**record, **traced(self.customer_keys, key), "size": size})

    def _trace_get(self, key: str) -> None:
        trace({"op": "GetObject", "bucket": self.bucket, "key": key,
               **traced(self.customer_keys, key)})

    # -- reads ----------------------------------------------------------------------------

    def plan_loads(self, count: int, size: int, window: int) -> tuple[int, int]:
        return plan(count, size, window, self.settings.concurrency, MAX_REQUEST_BYTES)

    def get_into(self, key: str, buffer: memoryview) -> ObjectInfo:
        info: ObjectInfo = _wait_for(lambda done: self.submit_get_into(key, buffer, done))
        return info

    def submit_get_into(
        self, key: str, buffer: memoryview, done: GetDone, *, parts: int = 1
    ) -> Cancel:
        """Start a GET into ``buffer`` (exactly the block's size, checked from the answer's
        headers before any byte lands) as ``parts`` ranged requests at once; ``done(info,
        None)`` or ``done(None, error)`` once, from another thread, after every part left
        the buffer. Returns a function that cancels the read."""
        self.pacer.check("GET", self._where(key))
        if self._trace:
            self._trace_get(key)
        if self.on_request is not None:
            done = reporting_done(self.on_request, "get", key, buffer.nbytes, done)
        block = BlockGet(self, key, self._where(key), buffer, done)
        block.start(max(parts, -(-len(buffer) // MAX_REQUEST_BYTES)))
        return block.cancel

    @reported
    def get(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
        """The whole object (a manifest, or a block of unknown destination)."""
        if self._trace:
            self._trace_get(key)
        where = self._where(key)
        try:
            data, answer = small_get(self, key, where, max_bytes)
        except RangeNotSatisfiable:
            return b"", ObjectInfo(key=key, size=0)  # a 0-byte object: its callers judge it
        if len(data) != answer.size:
            raise cut_short("GET", where, len(data), answer.size)
        return data, answer.info()

    submits_files = True

    def get_to_path(self, key: str, path: str, *, max_bytes: int) -> ObjectInfo:
        info: ObjectInfo = _wait_for(
            lambda done: self.submit_get_to_path(key, path, max_bytes, done)
        )
        return info

    def submit_get_to_path(self, key: str, path: str, max_bytes: int, done: GetDone) -> Cancel:
        """Start a GET that awscrt writes into the file at ``path`` in C (``recv_filepath``:
        the file is opened before this returns), its answer held to the same rules as
        every GET (its token, the range asked, at most ``max_bytes``: a larger object is
        refused from its headers); ``done(info, None)`` or ``done(None, error)`` once,
        from another thread. Returns a function that cancels it."""
        where = self._where(key)
        if self._trace:
            trace({"op": "GetObject", "bucket": self.bucket, "key": key})
        if max_bytes == 0:
            # An object listed as empty is looked at, not written: awscrt writing an empty
            # body into a file crashed the process now and then (SIGSEGV on its thread).
            try:
                info = self.head(key)
                if info is None:
                    raise ObjectNotFoundError(f"GET {where}: no such object")
                if info.size:
                    raise oversized(where, info.size, 0)
            except Exception as exc:
                done(None, exc)
            else:
                done(info, None)
            return _nothing  # the look reported itself
        if self.on_request is not None:
            done = reporting_done(self.on_request, "get", key, max_bytes, done)

        def got(_: bytes, answer: Answer, error: BaseException | None) -> None:
            if isinstance(error, RangeNotSatisfiable):  # a 0-byte object: its callers judge it
                done(ObjectInfo(key=key, size=0), None)
                return
            if error is not None:
                done(None, error)
                return
            try:
                size = os.stat(path).st_size
            except OSError as exc:
                done(None, from_os_error(exc, "write", where))
                return
            if size != answer.size:
                done(None, cut_short("GET", where, size, answer.size))
            else:
                done(answer.info(), None)

        return submit_small_get(self, key, where, max_bytes, got, path=path).cancel

    @reported
    def head(self, key: str) -> ObjectInfo | None:
        """A look bound to its request, as :meth:`S3Store.head`: a GET of the object's
        first byte carrying a token, on awscrt."""
        if self._trace:
            self._trace_get(key)
        try:
            _, answer = small_get(self, key, self._where(key), 1, look=True)
        except RangeNotSatisfiable:
            return ObjectInfo(key=key, size=0)  # a 0-byte object: its callers judge it
        except ObjectNotFoundError as missing:
            if not missing.bound:
                self.confirm_absent(key)
            return None
        return answer.info()

    # -- lifetime -------------------------------------------------------------------------

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

    def close(self) -> None:
        self._calls.close()
        super().close()


def _nothing() -> None:
    """The cancel function of a request that ended before it was returned."""


def _wait_for(submit: Callable[[Callable[[Any, BaseException | None], None]], Cancel]) -> Any:
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
