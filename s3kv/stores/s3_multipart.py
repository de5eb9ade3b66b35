"""Multipart uploads on S3: a large write in parts, and the uploads left behind.

A mixin of :class:`s3kv.stores.s3.S3Store` (it uses the store's boto3 client, bucket,
settings, error translation and page retries). A write at or over
``multipart_threshold_bytes`` goes in parts of ``multipart_chunk_bytes``; whatever
interrupts it aborts the upload, so no billable parts stay behind. gc lists and aborts
the uploads that others left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from s3kv.retry import unpaced
from s3kv.settings import S3Settings
from s3kv.stores.base import MultipartUpload, ObjectInfo, PutOptions
from s3kv.stores.network import Network
from s3kv.stores.pages import PageGuard
from s3kv.stores.rules import ConditionFailed


class Multipart:
    """``put`` of a large body in parts; ``list_multipart_uploads``/``abort_multipart_upload``."""

    bucket: str
    client: Any
    network: Network
    settings: S3Settings
    _where: Callable[[str], str]
    _translated: Callable[[str, str], AbstractContextManager[Any]]
    _page: Callable[[str, str, Any], dict[str, Any]]
    _write_params: Callable[[str, PutOptions], dict[str, Any]]
    head: Callable[[str], ObjectInfo | None]

    def _put_multipart(self, key: str, data: memoryview, options: PutOptions) -> bool:
        where = self._where(key)
        if options.create_only and self.head(key) is not None:
            return False
        with self._translated("CREATE-MULTIPART", where):
            upload_id = self.client.create_multipart_upload(**self._write_params(key, options))[
                "UploadId"
            ]
        chunk = self.settings.multipart_chunk_bytes
        try:
            parts = []
            for number, offset in enumerate(range(0, len(data), chunk), start=1):
                with self._translated("UPLOAD-PART", where):
                    resp = self.client.upload_part(
                        Bucket=self.bucket,
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=data[offset : offset + chunk],
                    )
                parts.append({"PartNumber": number, "ETag": resp["ETag"]})
            complete: dict[str, Any] = {
                "Bucket": self.bucket,
                "Key": key,
                "UploadId": upload_id,
                "MultipartUpload": {"Parts": parts},
            }
            if options.create_only:
                complete["IfNoneMatch"] = "*"
            if options.if_match is not None:
                complete["IfMatch"] = options.if_match
            try:
                with self._translated("COMPLETE-MULTIPART", where):
                    self.client.complete_multipart_upload(**complete)
            except ConditionFailed:
                self._abort(key, upload_id)
                return False
        except BaseException:
            # Never leave billable parts behind: abort, whatever interrupted us.
            self._abort(key, upload_id)
            raise
        if options.tags and self.settings.tag_blocks:
            # Ceph RGW drops tags given at CreateMultipartUpload; set them again.
            with self._translated("PUT-TAGGING", where):
                self.client.put_object_tagging(
                    Bucket=self.bucket,
                    Key=key,
                    Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in options.tags.items()]},
                )
        return True

    def _abort(self, key: str, upload_id: str) -> None:
        try:
            with unpaced():  # cleanup goes out even while the store asks to slow down
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id
                )
        except Exception:
            pass

    def list_multipart_uploads(self, prefix: str) -> Iterator[MultipartUpload]:
        where = self._where(prefix)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        guard = PageGuard("LIST-MULTIPART", where, self.network.endpoint, None)
        while True:
            page = self._page(
                "LIST-MULTIPART", where, lambda: self.client.list_multipart_uploads(**kwargs)
            )
            yield from guard.uploads(page)
            markers = guard.next_markers(page)
            if markers is None:
                return
            kwargs["KeyMarker"], kwargs["UploadIdMarker"] = markers

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        with self._translated("ABORT-MULTIPART", self._where(upload.key)):
            self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=upload.key, UploadId=upload.upload_id
            )
