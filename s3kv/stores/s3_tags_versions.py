"""Object tags and bucket versions on S3: what renewal, verify, repair and gc keep track of.

A mixin of :class:`s3kv.stores.s3.S3Store` (it uses the store's boto3 client, bucket,
error translation and page retries): reading and putting back a block's tags (Ceph RGW
drops them when a renewal copies a block onto itself), and a versioned bucket's status,
versions and the removal of noncurrent ones (gc reports what a versioned bucket still
stores). Listing pages are checked as every listing is: a truncated page must move on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from s3kv.stores.base import DELETE_BATCH, ObjectVersion
from s3kv.stores.hooks import reported
from s3kv.stores.network import Network
from s3kv.stores.rules import not_s3


class TagsAndVersions:
    """``get_tags``/``put_tags`` and ``versioning``/``list_versions``/``delete_versions``."""

    bucket: str
    client: Any
    network: Network
    name: str
    _where: Callable[[str], str]
    _translated: Callable[[str, str], AbstractContextManager[Any]]
    _page: Callable[[str, str, Any], dict[str, Any]]

    @reported
    def get_tags(self, key: str) -> dict[str, str] | None:
        with self._translated("GET-TAGGING", self._where(key)):
            got = self.client.get_object_tagging(Bucket=self.bucket, Key=key)
        return {t["Key"]: t["Value"] for t in got.get("TagSet") or ()}

    @reported
    def put_tags(self, key: str, tags: Mapping[str, str]) -> None:
        with self._translated("PUT-TAGGING", self._where(key)):
            self.client.put_object_tagging(
                Bucket=self.bucket,
                Key=key,
                Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in tags.items()]},
            )

    def versioning(self) -> str | None:
        with self._translated("GET-VERSIONING", self.name):
            status = self.client.get_bucket_versioning(Bucket=self.bucket).get("Status")
        return str(status) if status else None

    def list_versions(self, prefix: str) -> Iterator[ObjectVersion]:
        where = self._where(prefix)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            page = self._page(
                "LIST-VERSIONS", where, lambda: self.client.list_object_versions(**kwargs)
            )
            yield from _versions(page)
            if not page.get("IsTruncated"):
                return
            markers = (page.get("NextKeyMarker"), page.get("NextVersionIdMarker"))
            if not markers[0] or markers == (
                kwargs.get("KeyMarker"),
                kwargs.get("VersionIdMarker"),
            ):
                why = "a truncated page without a new marker"
                raise not_s3("LIST-VERSIONS", where, self.network.endpoint, why)
            kwargs["KeyMarker"], kwargs["VersionIdMarker"] = markers

    def delete_versions(self, items: Sequence[tuple[str, str]]) -> dict[str, str]:
        failed: dict[str, str] = {}
        for i in range(0, len(items), DELETE_BATCH):
            batch = items[i : i + DELETE_BATCH]
            with self._translated("DELETE", self._where(batch[0][0] if batch else "")):
                resp = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={
                        "Objects": [{"Key": k, "VersionId": v} for k, v in batch],
                        "Quiet": False,
                    },
                )
            confirmed = {(d.get("Key"), d.get("VersionId")) for d in resp.get("Deleted", ())}
            errors = {(e.get("Key"), e.get("VersionId")): e for e in resp.get("Errors", ())}
            for key, version in batch:
                err = errors.get((key, version))
                if err is not None:
                    failed[f"{key} {version}"] = f"{err.get('Code')}: {err.get('Message')}"
                elif (key, version) not in confirmed:
                    failed[f"{key} {version}"] = "the store's answer did not name it as deleted"
        return failed


def _versions(page: dict[str, Any]) -> Iterator[ObjectVersion]:
    for v in page.get("Versions") or ():
        yield ObjectVersion(
            str(v["Key"]),
            str(v.get("VersionId") or "null"),
            int(v.get("Size") or 0),
            bool(v.get("IsLatest")),
            False,
            v.get("LastModified"),
        )
    for m in page.get("DeleteMarkers") or ():
        yield ObjectVersion(
            str(m["Key"]),
            str(m.get("VersionId") or "null"),
            0,
            bool(m.get("IsLatest")),
            True,
            m.get("LastModified"),
        )
