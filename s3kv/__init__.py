"""s3kv: vLLM KV-cache blocks in S3-compatible object storage.

Keys are byte-identical to vLLM 0.33.0's ``FileMapper``; see :class:`Namespace`,
:class:`KeyMapper` and :func:`parse_key`.

The errors are imported at once (they import nothing); every other public name is
imported on first use (PEP 562), so ``import s3kv`` and the ``s3kv`` command's ``--help``
and ``--version`` start without boto3, awscrt and pydantic.
"""

from __future__ import annotations

import importlib
import typing

from s3kv.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ChecksumMismatchError,
    ClockSkewError,
    ClosedError,
    CustomerKeyError,
    ExpiredCredentialsError,
    IntegrityError,
    InvalidAnswerError,
    InvalidInputError,
    InvalidKeyError,
    InvalidLocationError,
    InvalidNamespaceError,
    InvalidPrefixError,
    InvalidTenantError,
    LeaseHeldError,
    ManifestError,
    ManifestMismatchError,
    ManifestMissingError,
    NamespaceConflictError,
    NotAnS3KVKeyError,
    NothingMatchedError,
    ObjectNotFoundError,
    S3KVError,
    SettingsError,
    SizeMismatchError,
    StoreError,
    StoreFullError,
    StorePausedError,
    TransferCancelledError,
    TransferError,
    TransientStoreError,
    UnsupportedByStoreError,
    WrongRegionError,
)

if typing.TYPE_CHECKING:
    from s3kv.naming.keys import KeyMapper, make_offload_key, split_offload_key
    from s3kv.naming.namespace import Namespace
    from s3kv.naming.parse import ParsedKey, parse_key
    from s3kv.report import TransferReport
    from s3kv.settings import S3Settings
    from s3kv.transfers.downloader import Downloader
    from s3kv.transfers.jobs import TransferJob
    from s3kv.transfers.uploader import Uploader

__version__ = "0.1.0"

_LAZY = {
    "Downloader": "s3kv.transfers.downloader",
    "KeyMapper": "s3kv.naming.keys",
    "Namespace": "s3kv.naming.namespace",
    "ParsedKey": "s3kv.naming.parse",
    "S3Settings": "s3kv.settings",
    "TransferJob": "s3kv.transfers.jobs",
    "TransferReport": "s3kv.report",
    "Uploader": "s3kv.transfers.uploader",
    "make_offload_key": "s3kv.naming.keys",
    "parse_key": "s3kv.naming.parse",
    "split_offload_key": "s3kv.naming.keys",
}
"""Public names imported on first use, and the module each comes from."""


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 's3kv' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AccessDeniedError",
    "BucketNotFoundError",
    "ChecksumMismatchError",
    "ClockSkewError",
    "ClosedError",
    "CustomerKeyError",
    "Downloader",
    "ExpiredCredentialsError",
    "IntegrityError",
    "InvalidAnswerError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidLocationError",
    "InvalidNamespaceError",
    "InvalidPrefixError",
    "InvalidTenantError",
    "KeyMapper",
    "LeaseHeldError",
    "ManifestError",
    "ManifestMismatchError",
    "ManifestMissingError",
    "Namespace",
    "NamespaceConflictError",
    "NotAnS3KVKeyError",
    "NothingMatchedError",
    "ObjectNotFoundError",
    "ParsedKey",
    "S3KVError",
    "S3Settings",
    "SettingsError",
    "SizeMismatchError",
    "StoreError",
    "StoreFullError",
    "StorePausedError",
    "TransferCancelledError",
    "TransferError",
    "TransferJob",
    "TransferReport",
    "TransientStoreError",
    "UnsupportedByStoreError",
    "Uploader",
    "WrongRegionError",
    "__version__",
    "make_offload_key",
    "parse_key",
    "split_offload_key",
]
