"""The one exception tree of s3kv.

Every error s3kv raises on purpose derives from :class:`S3KVError`. Errors about the
caller's input also derive from :class:`ValueError`; "not there" errors from
:class:`FileNotFoundError`; permission errors from :class:`PermissionError`, so callers
can catch either the s3kv class or the matching built-in::

    S3KVError
    ├── InvalidInputError (ValueError)         bad argument, flag or environment value
    │   ├── InvalidNamespaceError              a run-config field vLLM would hash differently
    │   ├── InvalidKeyError                    block hash, group index, offload key
    │   ├── InvalidPrefixError                 key prefix or over-long key
    │   ├── NotAnS3KVKeyError                  a key outside the vLLM/s3kv layout
    │   ├── InvalidLocationError               s3://bucket/prefix URL or directory
    │   ├── InvalidTenantError                 a tenant id outside the rule (s3kv.naming.tenants)
    │   └── SettingsError                      connection settings
    ├── ManifestError                          config.json unreadable or inconsistent
    │   ├── ManifestMissingError (FileNotFoundError)
    │   ├── ManifestMismatchError              fields do not hash to the folder's digest
    │   └── NamespaceConflictError             an existing manifest holds other fields
    ├── StoreError                             the object store or directory failed
    │   ├── ObjectNotFoundError (FileNotFoundError)
    │   ├── AccessDeniedError (PermissionError)
    │   │   ├── ExpiredCredentialsError        a session token or role credentials expired
    │   │   └── CustomerKeyError               the object's SSE-C key is not the one sent
    │   ├── BucketNotFoundError (FileNotFoundError)
    │   ├── WrongRegionError                   the bucket lives in another region
    │   ├── ClockSkewError                     this host's clock is too far from the store's
    │   ├── UnsupportedByStoreError            the store lacks a feature s3kv relies on
    │   ├── InvalidAnswerError                 an answer that is not what S3 says
    │   ├── StoreFullError                     507 or a quota: the store takes no more
    │   └── TransientStoreError                throttling, 5xx, dropped connection, timeout
    │       └── StorePausedError               not sent: its store asked to slow down
    ├── IntegrityError                         a block's bytes are not what was stored
    │   ├── SizeMismatchError
    │   └── ChecksumMismatchError
    ├── TransferError                          a batch finished with failed blocks
    │   └── TransferCancelledError
    ├── NothingMatchedError (LookupError)      a location, namespace or rank matched nothing
    ├── LeaseHeldError                         another gc runs on the same location
    └── ClosedError (RuntimeError)             an Uploader/Downloader used after close()

What an S3 answer means (its error code and HTTP status) is decided in one table,
:mod:`s3kv.stores.rules`, for every client s3kv speaks S3 with; OS errors of a directory
are translated in :mod:`s3kv.stores.errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from s3kv.retry import Pacer


class S3KVError(Exception):
    """Base class of every error s3kv raises on purpose."""


class InvalidInputError(S3KVError, ValueError):
    """An argument, flag or environment value is not acceptable."""


class InvalidNamespaceError(InvalidInputError):
    """A namespace (vLLM run-config) field is invalid."""


class InvalidKeyError(InvalidInputError):
    """A block hash, group index or OffloadKey is invalid."""


class InvalidPrefixError(InvalidInputError):
    """A key prefix is invalid, or a key would exceed S3's 1,024-byte limit."""


class NotAnS3KVKeyError(InvalidInputError):
    """A key does not follow the vLLM/s3kv layout."""


class InvalidLocationError(InvalidInputError):
    """A location is neither ``s3://bucket[/prefix]`` nor a usable directory."""


class InvalidTenantError(InvalidInputError):
    """A tenant id breaks the rule of :mod:`s3kv.naming.tenants` (characters, length)."""


class SettingsError(InvalidInputError):
    """Connection settings are invalid."""


class ManifestError(S3KVError):
    """A namespace manifest (``config.json``) is unreadable or inconsistent."""


class ManifestMissingError(ManifestError, FileNotFoundError):
    """A namespace has no manifest and the caller requires one."""


class ManifestMismatchError(ManifestError):
    """A manifest's fields do not hash to the digest of the folder holding it."""


class NamespaceConflictError(ManifestError):
    """An existing manifest holds different fields than the namespace being written."""


class StoreError(S3KVError):
    """The object store or directory failed an operation."""


class ObjectNotFoundError(StoreError, FileNotFoundError):
    """The object does not exist.

    ``named`` is the key the store's 404 named (S3's ``<Key>``; "" when its error body
    named none, None when it had no body). ``bound`` is False when nothing proved the 404
    was the answer to this very request (a store whose 404s name no key, such as Ceph RGW:
    a stale answer on a desynchronised connection looks the same); callers that act on
    an absence then confirm it with a look that is bound (:meth:`s3kv.stores.Store.head`).
    """

    def __init__(self, message: str, *, named: str | None = None, bound: bool = True) -> None:
        super().__init__(message)
        self.named = named
        self.bound = bound


class BucketNotFoundError(StoreError, FileNotFoundError):
    """The bucket does not exist."""


class AccessDeniedError(StoreError, PermissionError):
    """The credentials in use may not perform the operation."""


class ExpiredCredentialsError(AccessDeniedError):
    """The credentials were valid once and have expired (``ExpiredToken``): refresh them."""


class CustomerKeyError(AccessDeniedError):
    """The object is encrypted with a customer key (SSE-C) other than the one the request
    carried, or the request carried none: another tenant's object, one written before the
    secret was rotated, or a command run without ``--sse-c-secret-file``. Its bytes are
    never served: a load fails (a tier recomputes), a lookup answers absent."""


class WrongRegionError(StoreError):
    """The bucket lives in another region than the one requests are signed for.

    ``region`` is the bucket's region when the store said (``x-amz-bucket-region``).
    """

    def __init__(self, message: str, *, region: str | None = None) -> None:
        super().__init__(message)
        self.region = region


class ClockSkewError(StoreError):
    """This host's clock differs from the store's by more than S3 allows (15 minutes)."""


class UnsupportedByStoreError(StoreError):
    """The store lacks a feature s3kv relies on (``If-None-Match``, object tags): it
    answered 501 NotImplemented, or ignored a create-only condition."""


class InvalidAnswerError(StoreError):
    """An answer S3 would never give (a listing page that repeats a token or lists keys
    out of order): not retried, since asking again would loop."""


class TransientStoreError(StoreError):
    """A failure worth retrying: throttling, a 5xx, a dropped connection, a race.

    ``retry_after`` is the wait in seconds the store asked for (``Retry-After``), if any.
    ``throttled``: the store asked to slow down (503 SlowDown, 500, 429): the store's
    :class:`s3kv.retry.Pacer` pauses every request to it, not just this one. ``pacer``
    is that pacer, set by the store that raised it (the retry loops consult it).
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, throttled: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.throttled = throttled
        self.pacer: Pacer | None = None


class StorePausedError(TransientStoreError):
    """A request not sent: its store asked to slow down, and every request to it waits
    until ``retry_after`` seconds from now. Retry loops wait, without counting an attempt."""


class StoreFullError(StoreError):
    """The store refused a write for lack of space or quota (507 InsufficientStorage,
    ``QuotaExceeded``): not retried, since asking again gets the same answer."""


class IntegrityError(S3KVError):
    """A block's bytes are not what was stored."""


class SizeMismatchError(IntegrityError):
    """A block's size differs from the size expected."""


class ChecksumMismatchError(IntegrityError):
    """A block's checksum differs from the one recorded when it was stored."""


class TransferError(S3KVError):
    """A batch transfer finished with failed blocks."""


class TransferCancelledError(TransferError):
    """A batch transfer was cancelled before it finished."""


class NothingMatchedError(S3KVError, LookupError):
    """A location holds no namespace, or a ``--namespace``/``--rank`` filter matched none.

    ``suggestions`` holds what the caller may have meant (the closest matches), best first.
    """

    def __init__(self, message: str, *, suggestions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.suggestions = suggestions


class LeaseHeldError(S3KVError):
    """Another ``gc`` holds the location's lease (one gc at a time per location)."""


class ClosedError(S3KVError, RuntimeError):
    """An Uploader or Downloader was used after ``close()``."""


def describe_value(value: object, limit: int = 80) -> str:
    """A short repr for error messages (long values are cut)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 namespace``, ``2 namespaces``: a count and its noun, agreeing."""
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"
