"""The S3 store: boto3, one client shared by every thread, with zero-copy bodies.

Uploads hand the caller's buffer to the socket (``sendall`` of a memoryview); downloads
read the response socket straight into the caller's buffer (``readinto``). botocore's own
retries are off: :mod:`s3kv.retry` retries with a deadline, including failures in the
middle of a body that botocore cannot retry. Listing pages are retried here, page by
page (a generator cannot be retried from outside), and checked (:mod:`.pages`).

Every answer is checked for what it claims: a PUT needs an ETag (and a checksum the store
echoes must be ours), a GET or HEAD an ETag and no HTML, a delete counts only for the
keys the store names as deleted. Anything else is no S3 answer and names the endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from s3kv.errors import ObjectNotFoundError, StoreError
from s3kv.integrity import METADATA_KEY, WRITE_ID_KEY, Buffer, Checksum
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores.base import (
    DELETE_BATCH,
    ObjectDetails,
    ObjectInfo,
    PutOptions,
    Store,
)
from s3kv.stores.echoes import Echoes, request_token
from s3kv.stores.endpoint import configured_endpoint
from s3kv.stores.errors import client_setup, translated
from s3kv.stores.hooks import reported
from s3kv.stores.network import network_for
from s3kv.stores.pages import PageGuard
from s3kv.stores.rules import (
    ConditionFailed,
    RangeNotSatisfiable,
    attempt_seconds,
    check_found,
    gone_or_changed,
    no_answer,
    not_s3,
    oversized,
    ranged_size,
    size_mismatch,
    tagging,
    write_metadata,
)
from s3kv.stores.s3_body import BodyWatch, read_into
from s3kv.stores.s3_client import make_client, mirror_copy_conditions, new_session
from s3kv.stores.s3_multipart import Multipart
from s3kv.stores.s3_tags_versions import TagsAndVersions
from s3kv.stores.watchdog import Watchdog


class S3Store(Multipart, TagsAndVersions, Store):
    """Objects in one bucket of an S3-compatible store."""

    records_checksums = True
    has_tags = True

    def __init__(self, bucket: str, settings: S3Settings, *, client: Any = None) -> None:
        self.bucket = bucket
        self.settings = settings
        session = new_session(settings)
        with client_setup():
            network = network_for(configured_endpoint(session, settings), settings, session)
        self.client = (
            client if client is not None
            else make_client(settings, session=session, network=network)
        )
        # What boto3 resolved (flags, environment, profile, services section): stores on
        # one endpoint copy server-side; messages name it without anything secret.
        self.endpoint = str(self.client.meta.endpoint_url)
        self.network = network_for(self.endpoint, settings, session)
        self.region = self.client.meta.region_name
        self.echoes = Echoes(on_foreign=self._retire_connections)
        self._watchdog = Watchdog(settings.read_timeout_seconds, name="s3kv-body-watchdog")
        self.name = f"s3://{bucket}"

    def _where(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _retire_connections(self, carrier: object = None) -> None:
        """An answer that was another request's came on a kept-alive connection: close
        the idle ones (the culprit among them), so no later request reads its leftover."""
        session = getattr(getattr(self.client, "_endpoint", None), "http_session", None)
        if session is not None:
            session.close()

    def _translated(self, operation: str, where: str) -> Any:
        return translated(operation, where, self.network, self.region)

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
            self.echoes.check_token("GET", where, self.network.endpoint, token,
                                    resp.get("CacheControl"))
            if not isinstance(resp.get("ContentLength"), int):
                raise not_s3("GET", where, self.network.endpoint, "no Content-Length")
            size = ranged_size(where, resp.get("ContentRange"), resp["ContentLength"], first)
        except StoreError:
            resp["Body"].close()  # never read: the connection is dropped instead
            raise
        return resp, size

    @reported
    def get(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
        where = self._where(key)
        started = time.monotonic()
        try:
            with self._translated("GET", where):
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
            with self._translated("GET", where):
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
            with self._translated("GET", where):
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
        """boto3's HEAD of ``key``: what it says of the object, and the whole answer."""
        where = self._where(key)
        try:
            with self._translated("HEAD", where):
                resp = self.client.head_object(Bucket=self.bucket, Key=key)
        except ObjectNotFoundError:
            return None
        return self._info("HEAD", where, key, resp), resp

    def _info(self, operation: str, where: str, key: str, resp: dict[str, Any]) -> ObjectInfo:
        check_found(operation, where, self.network.endpoint, resp.get("ETag"),
                    resp.get("ContentType"))
        if not isinstance(resp.get("ContentLength"), int):
            raise not_s3(operation, where, self.network.endpoint, "no Content-Length")
        return _info(key, resp)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        where = self._where(prefix)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if start_after:
            kwargs["StartAfter"] = start_after
        guard = PageGuard("LIST", where, self.network.endpoint, start_after)
        while True:
            page = self._page("LIST", where, lambda: self.client.list_objects_v2(**kwargs))
            yield from guard.objects(page)
            token = guard.next_token(page)
            if token is None:
                return
            kwargs["ContinuationToken"] = token

    def _page(self, operation: str, where: str, fetch: Any) -> dict[str, Any]:
        """One listing page, retried under the one policy (:mod:`s3kv.retry`)."""

        def attempt() -> dict[str, Any]:
            with self._translated(operation, where):
                page: dict[str, Any] = fetch()
            return page

        return with_retries(attempt, self.settings)

    # -- writes -----------------------------------------------------------------------

    @reported
    def put(self, key: str, data: Buffer, options: PutOptions) -> bool:
        if len(data) >= self.settings.multipart_threshold_bytes:
            return self._put_multipart(key, memoryview(data), options)
        params = self._write_params(key, options)
        params["Body"] = data
        if options.create_only:
            params["IfNoneMatch"] = "*"
        if options.if_match is not None:
            params["IfMatch"] = options.if_match
        if options.checksum is not None:
            params[options.checksum.s3_parameter] = options.checksum.value
        where = self._where(key)
        md5 = self.echoes.md5_of(data)
        try:
            with self._translated("PUT", where):
                resp = self.client.put_object(**params)
        except ConditionFailed:
            return False
        echoed = resp.get(options.checksum.s3_parameter) if options.checksum else None
        self.echoes.check_stored(
            where, self.network.endpoint, etag=resp.get("ETag"), options=options, echoed=echoed,
            body=data, md5=md5,
        )
        return True

    def _write_params(self, key: str, options: PutOptions) -> dict[str, Any]:
        """What :func:`.rules.write_headers` sends, as boto3's parameters."""
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        metadata = write_metadata(options)
        if metadata:
            params["Metadata"] = metadata
        tags = tagging(options, self.settings)
        if tags:
            params["Tagging"] = tags
        return params

    def delete_many(self, keys: Sequence[str]) -> dict[str, str]:
        """Only keys the store names as deleted count: anything else is a failure (an
        empty or foreign 200 confirms nothing). Non-quiet mode, so each key is named."""
        failed: dict[str, str] = {}
        for i in range(0, len(keys), DELETE_BATCH):
            batch = keys[i : i + DELETE_BATCH]
            with self._translated("DELETE", self._where(batch[0] if batch else "")):
                resp = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": False},
                )
            deleted = {d.get("Key") for d in resp.get("Deleted", ())}
            errors = {e.get("Key"): e for e in resp.get("Errors", ())}
            for key in batch:
                if key in errors:
                    err = errors[key]
                    failed[key] = f"{err.get('Code')}: {err.get('Message')}"
                elif key not in deleted:
                    failed[key] = (
                        f"{self.network.shown} did not confirm the delete (its answer names "
                        "this key neither as deleted nor as failed); the object may remain"
                    )
        return failed

    def delete(self, key: str, *, if_match: str | None = None) -> bool:
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if if_match is not None:
            params["IfMatch"] = if_match
        try:
            with self._translated("DELETE", self._where(key)):
                self.client.delete_object(**params)
        except (ConditionFailed, ObjectNotFoundError):
            # 412: another ETag now; 404: gone (moto answers NoSuchKey to If-Match)
            return False
        return True

    def copies_from(self, source: Store) -> bool:
        return isinstance(source, S3Store) and source.endpoint == self.endpoint

    def copy_from(self, source: Store, source_key: str, key: str) -> bool:
        if not (isinstance(source, S3Store) and self.copies_from(source)):  # (narrows its type)
            return False
        where = self._where(key)
        if self.head(key) is not None:
            return False
        with self._translated("COPY", where):
            self.client.copy_object(
                Bucket=self.bucket,
                Key=key,
                CopySource={"Bucket": source.bucket, "Key": source_key},
            )
        return True

    @reported
    def describe(self, key: str) -> ObjectDetails | None:
        """boto3's HEAD: every user metadata field, and the store's clock (``Date``)."""
        found = self._head(key)
        if found is None:
            return None
        info, resp = found
        return ObjectDetails(info, dict(resp.get("Metadata") or {}), _server_time(resp))

    @reported
    def renew(
        self, key: str, *, unmodified_since: datetime, metadata: Mapping[str, str]
    ) -> datetime | None:
        where = self._where(key)
        if self.settings.endpoint_url is not None:
            mirror_copy_conditions(self.client)
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "CopySource": {"Bucket": self.bucket, "Key": key},
            # Not If-Match as well: S3 and RGW copy when the ETag matches, whatever the
            # date says, and a renewal keeps the ETag, so another node's renewal would
            # go unseen. Any write since the date (to the second) fails the copy.
            "CopySourceIfUnmodifiedSince": unmodified_since,
            # S3 copies an object onto itself only when something changes; REPLACE with
            # the same metadata is that change, and the tags are copied (TaggingDirective).
            "MetadataDirective": "REPLACE",
            "Metadata": dict(metadata),
            "TaggingDirective": "COPY",
        }
        try:
            with self._translated("COPY", where):
                resp = self.client.copy_object(**params)
        except (ConditionFailed, ObjectNotFoundError):  # gone, or no longer the one seen
            return None
        when: datetime | None = resp.get("CopyObjectResult", {}).get("LastModified")
        return when or _server_time(resp) or datetime.now(timezone.utc)

    def delete_if_unchanged(
        self, items: Sequence[tuple[str, str | None]]
    ) -> tuple[dict[str, str], set[str]]:
        failed: dict[str, str] = {}
        gone: set[str] = set()
        for i in range(0, len(items), DELETE_BATCH):
            batch = items[i : i + DELETE_BATCH]
            objects = [{"Key": k, **({"ETag": e} if e else {})} for k, e in batch]
            with self._translated("DELETE", self._where(batch[0][0] if batch else "")):
                # Not quiet: a delete counts only when the answer names its key as deleted.
                resp = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": False}
                )
            confirmed = {d.get("Key") for d in resp.get("Deleted", ())}
            for err in resp.get("Errors", ()):
                if gone_or_changed(str(err.get("Code", ""))):
                    gone.add(err["Key"])
                else:
                    failed[err["Key"]] = f"{err.get('Code')}: {err.get('Message')}"
            for key, _ in batch:
                if key not in confirmed and key not in gone and key not in failed:
                    failed[key] = "the store's answer did not name this key as deleted"
        return failed, gone

    def close(self) -> None:
        self._watchdog.close()
        self.client.close()




def _server_time(resp: dict[str, Any]) -> datetime | None:
    """The store's clock when it answered: its ``Date`` header."""
    date = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not date:
        return None
    try:
        when = parsedate_to_datetime(date)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _info(key: str, resp: dict[str, Any]) -> ObjectInfo:
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
