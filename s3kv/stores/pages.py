"""Listing pages distrusted: what a page says is checked before anything is built on it.

A listing drives every command (copy, verify, delete), so a page that lies would make
them loop forever, double-count or delete the wrong things. S3 promises: keys in strictly
increasing order (UTF-8 binary order, which Python's ``str`` order is), a continuation
token whenever a page says it is truncated, and a token never seen before. A page that
breaks a promise raises :class:`~s3kv.errors.InvalidAnswerError` naming the endpoint;
it is not retried (asking again would loop), and no key of that page is used.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from s3kv.errors import InvalidAnswerError
from s3kv.stores.base import MultipartUpload, ObjectInfo
from s3kv.stores.rules import not_s3


class PageGuard:
    """Checks the pages of one listing, in the order they arrive."""

    def __init__(self, operation: str, where: str, endpoint: str, after: str | None) -> None:
        self.operation, self.where, self.endpoint = operation, where, endpoint
        self.last = after  # every key must sort after this one
        self.tokens: set[str] = set()

    def _broken(self, what: str) -> InvalidAnswerError:
        return InvalidAnswerError(
            f"{self.operation} {self.where}: {self.endpoint} sent a listing page that {what}; "
            "S3 never does: a proxy or store bug. Nothing of that page was used; retry "
            "later or check the endpoint"
        )

    def objects(self, page: Mapping[str, Any]) -> list[ObjectInfo]:
        """A ListObjectsV2 page's objects, checked (raises before returning any)."""
        if "IsTruncated" not in page:
            raise not_s3(self.operation, self.where, self.endpoint, "a listing without IsTruncated")
        out = []
        for item in page.get("Contents", ()):
            key, size = item.get("Key"), item.get("Size")
            if not isinstance(key, str) or not isinstance(size, int) or size < 0:
                raise self._broken("names an object without a key or size")
            self._in_order(key)
            out.append(
                ObjectInfo(
                    key=key,
                    size=size,
                    last_modified=item.get("LastModified"),
                    etag=item.get("ETag"),
                )
            )
        return out

    def _in_order(self, key: str) -> None:
        if self.last is not None and key <= self.last:
            what = "repeats" if key == self.last else "is out of order at"
            raise self._broken(f"{what} key {key!r} (after {self.last!r})")
        self.last = key

    def next_token(self, page: Mapping[str, Any]) -> str | None:
        """The token of the next page; None once a page says it is the last."""
        if not page.get("IsTruncated"):
            return None
        token = page.get("NextContinuationToken")
        if not token:
            raise self._broken("says it is truncated but gives no continuation token")
        return self._fresh(str(token))

    def _fresh(self, token: str) -> str:
        if token in self.tokens:
            raise self._broken("repeats a continuation token (the listing would loop)")
        self.tokens.add(token)
        return token

    def uploads(self, page: Mapping[str, Any]) -> Iterator[MultipartUpload]:
        """A ListMultipartUploads page's uploads, checked (raises before returning any)."""
        if "IsTruncated" not in page:
            raise not_s3(
                self.operation, self.where, self.endpoint, "an upload listing without IsTruncated"
            )
        out = []
        for item in page.get("Uploads", ()):
            key, upload_id = item.get("Key"), item.get("UploadId")
            if not isinstance(key, str) or not isinstance(upload_id, str):
                raise self._broken("names an upload without a key or id")
            out.append(MultipartUpload(key, upload_id, item.get("Initiated")))
        return iter(out)

    def next_markers(self, page: Mapping[str, Any]) -> tuple[str, str] | None:
        """(key marker, upload id marker) of the next page; None after the last page."""
        if not page.get("IsTruncated"):
            return None
        key, upload = page.get("NextKeyMarker"), page.get("NextUploadIdMarker")
        if not key:
            raise self._broken("says it is truncated but gives no next key marker")
        self._fresh(f"{key}\0{upload or ''}")
        return str(key), str(upload or "")
