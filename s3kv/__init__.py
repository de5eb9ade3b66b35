"""s3kv: vLLM KV-cache blocks in S3-compatible object storage.

Keys are byte-identical to vLLM 0.33.0's ``FileMapper``; see :class:`Namespace`,
:class:`KeyMapper` and :func:`parse_key`.
"""

from s3kv.downloader import Downloader
from s3kv.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ChecksumMismatchError,
    ClockSkewError,
    ClosedError,
    ExpiredCredentialsError,
    IntegrityError,
    InvalidAnswerError,
    InvalidInputError,
    InvalidKeyError,
    InvalidLocationError,
    InvalidNamespaceError,
    InvalidPrefixError,
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
    TransferCancelledError,
    TransferError,
    TransientStoreError,
    UnsupportedByStoreError,
    WrongRegionError,
)
from s3kv.jobs import TransferJob
from s3kv.keys import KeyMapper, make_offload_key, split_offload_key
from s3kv.namespace import Namespace
from s3kv.parse import ParsedKey, parse_key
from s3kv.report import TransferReport
from s3kv.settings import S3Settings
from s3kv.uploader import Uploader

__version__ = "0.1.0"

__all__ = [
    "AccessDeniedError",
    "BucketNotFoundError",
    "ChecksumMismatchError",
    "ClockSkewError",
    "ClosedError",
    "Downloader",
    "ExpiredCredentialsError",
    "IntegrityError",
    "InvalidAnswerError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidLocationError",
    "InvalidNamespaceError",
    "InvalidPrefixError",
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
