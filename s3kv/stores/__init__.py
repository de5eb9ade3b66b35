"""Stores: where objects live. S3 (boto3) or a local directory in vLLM's layout."""

from __future__ import annotations

from s3kv.naming.location import Location, parse_location
from s3kv.settings import S3Settings
from s3kv.stores.base import Cancel, MultipartUpload, ObjectInfo, PutOptions, Store
from s3kv.stores.local import LocalStore
from s3kv.stores.s3 import S3Store


def open_store(location: Location | str, settings: S3Settings | None = None) -> Store:
    """The store behind a location (``s3://bucket/prefix`` or a directory)."""
    if isinstance(location, str):
        location = parse_location(location)
    if location.bucket is not None:
        settings = settings or S3Settings.resolve()
        if settings.data_path == "botocore":
            return S3Store(location.bucket, settings)
        from s3kv.stores.crt import CrtS3Store

        return CrtS3Store(location.bucket, settings)
    assert location.path is not None
    return LocalStore(location.path)


__all__ = [
    "Cancel",
    "LocalStore",
    "MultipartUpload",
    "ObjectInfo",
    "PutOptions",
    "S3Store",
    "Store",
    "open_store",
]
