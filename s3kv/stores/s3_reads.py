"""Reads on S3 through boto3: whole objects, ranges, bodies into the caller's buffer, and
the look that tells whether an object is there.

A mixin of :class:`s3kv.stores.s3.S3Store` (its client, bucket, settings, error
translation and the :class:`~s3kv.stores.echoes.Echoes` of its answers). Every GET is bound
to its request: it carries a token its answer must echo (``response-cache-control``), a
ranged answer must be of the range asked, and a 404 must name the key asked, or be
confirmed by a listing of exactly that key where the store's 404s name none (Ceph RGW).
Presence is such a GET of one byte, not a HEAD: a HEAD's answer echoes nothing on every
store, and its 404 has no body, so a stale answer on the connection would decide
presence. A body is read straight into the caller's buffer, within its deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from s3kv.errors import AccessDeniedError, ObjectNotFoundError, StoreError, TransientStoreError
from s3kv.integrity import METADATA_KEY, WRITE_ID_KEY, Checksum
from s3kv.settings import S3Settings
from s3kv.stores.base import ObjectDetails, ObjectInfo
from s3kv.stores.echoes import Echoes, request_token
from s3kv.stores.hooks import reported
from s3kv.stores.network import Network
from s3kv.stores.rules import (
    RangeNotSatisfiable,
    attempt_seconds,
    check_found,
    no_answer,
    not_s3,
    oversized,
    ranged_size,
    size_mismatch,
    stale_answer,
)
from s3kv.stores.s3_body import BodyWatch, read_into
from s3kv.stores.watchdog import Watchdog


class Reads:
    """``get``, ``get_into``, ``get_range``, ``head`` and ``describe`` on boto3."""

    bucket: str
    client: Any
    network: Network
    settings: S3Settings
    echoes: Echoes
    on_request: Any
    _watchdog: Watchdog
    _where: Callable[[str], str]
    _translated: Callable[[str, str], AbstractContextManager[Any]]

    @contextmanager
    def _reading(self, key: str, where: str) -> Iterator[None]:
        """:meth:`_translated` for a GET of ``key``, whose 404 must name ``key`` to be its
        answer (:meth:`.echoes.Echoes.check_missing`; ``bound`` says whether it did)."""
        try:
            with self._translated("GET", where):
                yield
        except ObjectNotFoundError as missing:
            missing.bound = self.echoes.check_missing("GET", where, key, missing.named)
            raise

    # -- reads ------------------------------------------------------------------------

    def _get_object(
        self, key: str, where: str, *, first: int = 0, last: int | None = None
    ) -> tuple[dict[str, Any], int]:
        """A GetObject bound to its request (the token it sends must come back), of bytes
        ``first`` to ``last`` (inclusive; None: to the end) when ``last`` or ``first``
        is set; the answer and the object's size. A ranged answer must be of the range
        asked (``Content-Range``, ``Content-Length``), else it is a wire fault."""
        token = request_token()
        params: dict[str, Any] = {}
        if first or last is not None:
            params["Range"] = f"bytes={first}-" + ("" if last is None else str(last))
        resp: dict[str, Any] = self.client.get_object(
            Bucket=self.bucket, Key=key, ResponseCacheControl=token, **params
        )
        try:
            check_found("GET", where, self.network.endpoint, resp.get("ETag"),
                        resp.get("ContentType"))
            if not isinstance(resp.get("ContentLength"), int):
                raise not_s3("GET", where, self.network.endpoint, "no Content-Length")
            try:
                size = ranged_size(where, resp.get("ContentRange"), resp["ContentLength"], first)
            except TransientStoreError as framing:
                raise self.echoes.foreign(framing) from None
            self.echoes.check_token("GET", where, self.network.endpoint, token,
                                    resp.get("CacheControl"),
                                    ranged="Range" in params and "ContentRange" in resp)
        except StoreError:
            resp["Body"].close()  # never read: the connection is dropped instead
            raise
        return resp, size

    @reported
    def get(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
        where = self._where(key)
        started = time.monotonic()
        try:
            with self._reading(key, where):
                resp, size = self._get_object(
                    key, where, last=None if max_bytes is None else max_bytes - 1
                )
        except RangeNotSatisfiable:
            return b"", ObjectInfo(key=key, size=0)  # a 0-byte object: its callers judge it
        with self._translated("GET", where):
            info = replace(self._info("GET", where, key, resp), size=size)
            if max_bytes is not None and size > max_bytes:
                resp["Body"].close()  # never read: the connection is dropped instead
                raise oversized(where, size, max_bytes)
            data = bytearray(resp["ContentLength"])
            self._read(resp["Body"], memoryview(data), where, started)
        return bytes(data), info

    @reported
    def get_into(self, key: str, buffer: memoryview) -> ObjectInfo:
        where = self._where(key)
        started = time.monotonic()
        try:
            with self._reading(key, where):
                resp, size = self._get_object(key, where, last=len(buffer) - 1)
        except RangeNotSatisfiable:
            raise size_mismatch(where, 0, len(buffer)) from None
        with self._translated("GET", where):
            body = resp["Body"]
            if size != len(buffer) or resp["ContentLength"] != len(buffer):
                body.close()
                raise size_mismatch(where, size, len(buffer))
            info = replace(self._info("GET", where, key, resp), size=size)
            self._read(body, buffer, where, started)
        return info

    def _read(self, body: Any, buffer: memoryview, where: str, started: float) -> None:
        """A body into ``buffer``, within the request's deadline: botocore bounds each
        read by the read timeout, not a body that trickles in, so past the deadline
        (:func:`.rules.attempt_seconds`) its connection is shut down."""
        seconds = attempt_seconds(self.settings, len(buffer))
        watch = BodyWatch(body, started + seconds)
        if watch.sock is not None:
            self._watchdog.watch(watch)
        try:
            read_into(body, buffer, where)
        except Exception as exc:
            if watch.expired:
                raise no_answer("GET", where, self.network.endpoint, seconds) from exc
            raise
        finally:
            self._watchdog.forget(watch)

    @reported
    def get_range(self, key: str, *, start: int, end: int | None = None) -> bytes:
        where = self._where(key)
        started = time.monotonic()
        try:
            with self._reading(key, where):
                resp, _ = self._get_object(
                    key, where, first=start, last=None if end is None else end - 1
                )
        except RangeNotSatisfiable:
            # S3 answers 416 for a range starting at or past the end (any range of an
            # empty object); a directory's read returns no bytes: so do we.
            return b""
        with self._translated("GET", where):
            data = bytearray(resp["ContentLength"])
            self._read(resp["Body"], memoryview(data), where, started)
        return bytes(data)

    @reported
    def head(self, key: str) -> ObjectInfo | None:
        found = self._head(key)
        return None if found is None else found[0]

    def _head(self, key: str) -> tuple[ObjectInfo, dict[str, Any]] | None:
        """A look at ``key`` bound to its request: a GET of its first byte, whose answer
        must echo the request's token (a HEAD's answer echoes nothing on every store, and
        its 404 has no body: a stale answer would decide presence), and whose 404 must
        name the key or be confirmed (:meth:`confirm_absent`). What it says of the object
        (its size from ``Content-Range``), and the whole answer; None if it does not
        exist."""
        where = self._where(key)
        try:
            with self._reading(key, where):
                resp, size = self._get_object(key, where, last=0)
                resp["Body"].read()  # one byte: the connection goes back to the pool
            if "ContentRange" not in resp:  # S3 answers a range it can serve with one
                raise self.echoes.foreign(
                    stale_answer("GET", where, "a whole answer to a range of one byte"))
        except RangeNotSatisfiable:
            return ObjectInfo(key=key, size=0), {}  # a 0-byte object: its callers judge it
        except ObjectNotFoundError as missing:
            if not missing.bound:
                self.confirm_absent(key)
            return None
        return replace(self._info("GET", where, key, resp), size=size), resp

    def confirm_absent(self, key: str) -> None:
        """Make sure a 404 to ``key`` that named no key (Ceph RGW's 404s name none) was
        the store's answer to it: a listing of exactly ``key``, whose answer echoes the
        prefix it was asked for. Raises the foreign :class:`TransientStoreError` (retried
        on a fresh connection) when the object is listed after all, or when the listing's
        answer is another request's; a listing this key may not make leaves the 404 as
        it is (the absent side: a recompute or a create-only write settles it)."""
        where = self._where(key)
        try:
            with self._translated("LIST", where):
                page = self.client.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
        except AccessDeniedError:
            return
        if page.get("Prefix") != key:
            problem = f"a listing answered for the prefix {page.get('Prefix')!r}"
        elif any(o.get("Key") == key for o in page.get("Contents", ())):
            problem = "a 404 came, but the object is listed"
        else:
            return
        raise self.echoes.foreign(stale_answer("GET", where, problem))

    def _info(self, operation: str, where: str, key: str, resp: dict[str, Any]) -> ObjectInfo:
        check_found(operation, where, self.network.endpoint, resp.get("ETag"),
                    resp.get("ContentType"))
        if not isinstance(resp.get("ContentLength"), int):
            raise not_s3(operation, where, self.network.endpoint, "no Content-Length")
        return info_of(key, resp)

    @reported
    def describe(self, key: str) -> ObjectDetails | None:
        """A bound look (:meth:`_head`): every user metadata field, and the store's clock."""
        found = self._head(key)
        if found is None:
            return None
        info, resp = found
        return ObjectDetails(info, dict(resp.get("Metadata") or {}), server_time(resp))



def server_time(resp: dict[str, Any]) -> datetime | None:
    """The store's clock when it answered: its ``Date`` header."""
    date = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not date:
        return None
    try:
        when = parsedate_to_datetime(date)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def info_of(key: str, resp: dict[str, Any]) -> ObjectInfo:
    """What a GET's answer (boto3's) says of the object."""
    metadata = resp.get("Metadata") or {}
    recorded = metadata.get(METADATA_KEY)
    return ObjectInfo(
        key=key,
        size=int(resp["ContentLength"]),
        last_modified=resp.get("LastModified"),
        checksum=Checksum.parse(recorded) if recorded else None,
        etag=resp.get("ETag"),
        write_id=metadata.get(WRITE_ID_KEY),
    )
