"""The S3 store: boto3, one client shared by every thread, with zero-copy bodies.

Uploads hand the caller's buffer to the socket (``sendall`` of a memoryview); downloads
read the response socket straight into the caller's buffer (``readinto``). botocore's own
retries are off: :mod:`s3kv.retry` retries with a deadline, including failures in the
middle of a body that botocore cannot retry. Listing pages are retried here, page by
page (a generator cannot be retried from outside), and checked (:mod:`.pages`).

Every answer is checked for what it claims: a PUT needs an ETag (and a checksum the store
echoes must be ours), a GET an ETag, no HTML and the token its request sent, a 404 the
key asked; a delete counts only for the keys the store names as deleted. Anything else
is no S3 answer and names the endpoint. Reads, and the look that tells whether an object
is there (a GET of one byte, bound to its request), are in :mod:`.s3_reads`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from s3kv.errors import ObjectNotFoundError, TransientStoreError, UnsupportedByStoreError
from s3kv.integrity import Buffer
from s3kv.retry import Pacer, with_retries
from s3kv.settings import S3Settings, display_url
from s3kv.stores.base import (
    DELETE_BATCH,
    ObjectInfo,
    PutOptions,
    Store,
)
from s3kv.stores.echoes import Echoes
from s3kv.stores.endpoint import configured_endpoint
from s3kv.stores.errors import client_setup, translated
from s3kv.stores.hooks import reported
from s3kv.stores.network import network_for
from s3kv.stores.pages import PageGuard
from s3kv.stores.rules import (
    ConditionFailed,
    gone_or_changed,
    stale_answer,
)
from s3kv.stores.s3_client import make_client, mirror_copy_conditions, new_session
from s3kv.stores.s3_multipart import Multipart
from s3kv.stores.s3_reads import Reads, server_time
from s3kv.stores.s3_tags_versions import TagsAndVersions
from s3kv.stores.sse_c import keyring_for, send_keys
from s3kv.stores.watchdog import Watchdog
from s3kv.stores.writing import tagging, write_metadata

logger = logging.getLogger("s3kv")


class S3Store(Reads, Multipart, TagsAndVersions, Store):
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
        # Each tenant's objects are sent its key, on every request that touches them.
        self.customer_keys = keyring_for(settings.sse_c_secret_file)
        if self.customer_keys is not None:
            send_keys(self.client, self.customer_keys)
            if self.endpoint.startswith("http://"):
                logger.warning(
                    "s3kv: customer keys (SSE-C) go to %s over plain HTTP: each request "
                    "carries a tenant's key in the clear, and AWS and Ceph RGW refuse them "
                    "(400 InvalidRequest); use https://", self.network.shown)
        self.echoes = Echoes(on_foreign=self._retire_connections)
        self.pacer = Pacer(settings)
        """The store's pace (:class:`s3kv.retry.Pacer`): a pause after it throttled, shared
        by every request of both clients; boto3's wait at ``before-send``."""
        self.client.meta.events.register("before-send.s3", self._before_send)
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

    @contextmanager
    def _translated(self, operation: str, where: str) -> Iterator[None]:
        """A boto3 call, its failure in s3kv's tree, its outcome told to the pacer."""
        try:
            with translated(operation, where, self.network, self.region):
                yield
        except TransientStoreError as exc:
            self.pace(exc)
            raise
        self.pacer.succeeded()

    def pace(self, error: TransientStoreError) -> None:
        """A request failed for a moment: the retry loops consult this store's pacer, which
        pauses every request when the store asked to slow down."""
        error.pacer = self.pacer
        if error.throttled:
            self.pacer.throttled(error.retry_after)

    def _before_send(self, request: Any, **_: Any) -> None:
        """botocore's last step before a request leaves: none while the store is paused
        (but cleanup and questions about the pause, :func:`s3kv.retry.unpaced`)."""
        self.pacer.check(request.method, display_url(request.url))

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
        except ObjectNotFoundError as missing:
            if options.if_match is None:  # S3 answers a PUT without If-Match no NoSuchKey
                raise self.echoes.foreign(stale_answer("PUT", where, "404")) from None
            self.echoes.check_missing("PUT", where, key, missing.named)
            raise
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
        except UnsupportedByStoreError as exc:
            if self.customer_keys is None or self.customer_keys.key_for(key) is None:
                raise
            raise NotImplementedError(  # Ceph RGW 16 answers 501 to any copy of one
                f"{self.name} cannot copy objects encrypted with a customer key (SSE-C) "
                f"({exc}); encrypted blocks age from their writes"
            ) from None
        when: datetime | None = resp.get("CopyObjectResult", {}).get("LastModified")
        return when or server_time(resp) or datetime.now(timezone.utc)

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
