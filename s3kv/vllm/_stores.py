"""Stores the tier stacks on its S3 store: a forwarding base, and lookups' view of 403.

S3 answers a request for a missing key with 404 only to callers who may list the bucket;
others get 403. The reader and writer policies in ``terraform/`` grant ``s3:ListBucket``
held to the cache prefix, and Ceph RGW then answers 403 for every missing block (seen on
RGW 16; an unconditioned ``s3:ListBucket`` gives 404). The tier has read the manifest
under the same prefix with the same credentials before its first lookup, so a HEAD that
answers 403 there means "absent": :class:`DeniedHeadIsAbsent` says so, once in the log,
instead of failing the lookup batch (vLLM would log it and answer MISS for every key of
the batch, present ones included).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime

from s3kv.errors import AccessDeniedError
from s3kv.integrity import Buffer
from s3kv.stores.base import (
    Cancel,
    MultipartUpload,
    ObjectDetails,
    ObjectInfo,
    PutOptions,
    Store,
)

logger = logging.getLogger("s3kv.vllm")

GetDone = Callable[[ObjectInfo | None, BaseException | None], None]


class ForwardingStore(Store):
    """A store that hands every call to ``inner``; subclasses change a few."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.name = inner.name

    def get(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
        return self.inner.get(key, max_bytes=max_bytes)

    def get_into(self, key: str, buffer: memoryview) -> ObjectInfo:
        return self.inner.get_into(key, buffer)

    def get_range(self, key: str, *, start: int, end: int | None = None) -> bytes:
        return self.inner.get_range(key, start=start, end=end)

    def put(self, key: str, data: Buffer, options: PutOptions) -> bool:
        return self.inner.put(key, data, options)

    def head(self, key: str) -> ObjectInfo | None:
        return self.inner.head(key)

    def can_submit(self, size: int) -> bool:
        return self.inner.can_submit(size)

    def submit_put(
        self,
        key: str,
        data: memoryview,
        options: PutOptions,
        done: Callable[[bool | None, BaseException | None], None],
    ) -> Cancel:
        return self.inner.submit_put(key, data, options, done)

    def submit_get_into(
        self,
        key: str,
        buffer: memoryview,
        done: Callable[[ObjectInfo | None, BaseException | None], None],
        *,
        parts: int = 1,
    ) -> Cancel:
        return self.inner.submit_get_into(key, buffer, done, parts=parts)

    def plan_loads(self, count: int, size: int, window: int) -> tuple[int, int]:
        return self.inner.plan_loads(count, size, window)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix, start_after=start_after)

    def delete_many(self, keys: Sequence[str]) -> dict[str, str]:
        return self.inner.delete_many(keys)

    def copy_from(self, source: Store, source_key: str, key: str) -> bool:
        return self.inner.copy_from(source, source_key, key)

    def describe(self, key: str) -> ObjectDetails | None:
        return self.inner.describe(key)

    def renew(
        self, key: str, *, unmodified_since: datetime, metadata: Mapping[str, str]
    ) -> datetime | None:
        return self.inner.renew(key, unmodified_since=unmodified_since, metadata=metadata)

    def get_tags(self, key: str) -> dict[str, str] | None:
        return self.inner.get_tags(key)

    def put_tags(self, key: str, tags: Mapping[str, str]) -> None:
        self.inner.put_tags(key, tags)

    def delete_if_unchanged(
        self, items: Sequence[tuple[str, str | None]]
    ) -> tuple[dict[str, str], set[str]]:
        return self.inner.delete_if_unchanged(items)

    def list_multipart_uploads(self, prefix: str) -> Iterator[MultipartUpload]:
        return self.inner.list_multipart_uploads(prefix)

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        self.inner.abort_multipart_upload(upload)

    def quiesce(self, timeout: float) -> bool:
        return self.inner.quiesce(timeout)

    def close(self) -> None:
        self.inner.close()


class DeniedHeadIsAbsent(ForwardingStore):
    """Lookups' store: a HEAD answered 403 is an absent key (logged once)."""

    _told = False

    def head(self, key: str) -> ObjectInfo | None:
        try:
            return self.inner.head(key)
        except AccessDeniedError as exc:
            if not self._told:
                self._told = True
                logger.info(
                    "s3kv lookups: HEAD answered 403 (%s); the credentials may read but "
                    "not list this prefix, so S3 says 403 for missing keys: taken as absent",
                    exc,
                )
            return None
