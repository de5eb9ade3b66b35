"""Create-only writes, counted for what happened, on stores proven to honour them.

Every s3kv write is create-only (``If-None-Match: *``): 412 means the object was there.
Two things can make that count lie, and this module is the one place that handles them:

* **A write that landed but whose answer was lost** (the connection dropped after the
  store kept the object): the retry gets 412 and would count "already present". Each
  block write carries a token of its own in metadata (:func:`write_id`); after a failed
  attempt (and on awscrt's path, which may resend on its own, after any 412) a HEAD
  tells: the object holding our token is our write, counted stored.
* **A store that ignores If-None-Match** (older MinIO, some gateways) overwrites whatever
  is there and answers 200: every write would count "stored" and a racing writer's
  object could be replaced. The first write of a session (the manifest, written before
  any block) proves the store refuses a second create-only PUT of the same bytes; if it
  does not, s3kv refuses to write (:class:`UnsupportedByStoreError`). The probe rewrites
  bytes the object already holds, so it is harmless either way.
"""

from __future__ import annotations

import logging
import secrets
import threading

from s3kv.errors import (
    AccessDeniedError,
    S3KVError,
    TransientStoreError,
    UnsupportedByStoreError,
)
from s3kv.integrity import Buffer
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import PutOptions, Store

logger = logging.getLogger("s3kv")

PROBE_OPTIONS = PutOptions(create_only=True)


def write_id() -> str:
    """A token unique to one write (kept with the object; 16 hex digits)."""
    return secrets.token_hex(8)


def put_create_only(
    store: Store,
    key: str,
    data: Buffer,
    options: PutOptions,
    settings: S3Settings,
    *,
    cancelled: threading.Event | None = None,
) -> bool:
    """A create-only PUT under the retry policy; True if the object is the one we sent
    and this call stored it (see :func:`landed` for a 412 after a lost answer)."""
    unsure = store.retries_itself

    def attempt() -> bool:
        nonlocal unsure
        try:
            return store.put(key, data, options)
        except TransientStoreError:
            unsure = True  # it may have been stored before the failure
            raise

    created = with_retries(attempt, settings, cancelled=cancelled)
    if not created and unsure:
        return landed(store, key, options, len(memoryview(data)), settings)
    return created


def landed(store: Store, key: str, options: PutOptions, size: int, settings: S3Settings) -> bool:
    """Whether a 412 that followed a failed attempt found our own write: the object
    holds our write's token and size (without a token we cannot tell: False)."""
    if options.write_id is None:
        return False
    info = with_retries(lambda: store.head(key), settings)
    return info is not None and info.size == size and info.write_id == options.write_id


def prove_create_only(store: Store, key: str, stored: bytes, settings: S3Settings) -> None:
    """Check that ``store`` refuses a create-only PUT over an existing object.

    ``stored`` must be exactly the bytes at ``key`` (a manifest just written or read):
    the probe rewrites them, which changes nothing even on a store that ignores the
    condition. A second probe settles a probe that found the object gone (deleted
    meanwhile): it was just created, so the store must refuse this one.
    """
    for _ in range(2):
        try:
            created = with_retries(lambda: store.put(key, stored, PROBE_OPTIONS), settings)
        except AccessDeniedError:
            logger.warning(
                "s3kv: cannot check that %s honours If-None-Match (create-only writes): "
                "writing %s is denied",
                store.name,
                key,
            )
            return
        if not created:
            return
    raise UnsupportedByStoreError(
        f"{store.name}: the store ignores If-None-Match: * (a create-only PUT over "
        f"{key} was accepted twice): s3kv would overwrite existing blocks and count them "
        f"stored, so it writes nothing there. {_why_ignored(store, settings)}"
    )


def _why_ignored(store: Store, settings: S3Settings) -> str:
    """The likely cause and fix. Ceph RGW (16 at least) ignores the condition on a
    versioned bucket, and honours it on an unversioned one."""
    try:
        versioning = with_retries(store.versioning, settings)
    except S3KVError:
        versioning = None
    if versioning in ("Enabled", "Suspended"):
        return (
            f"The bucket is versioned ({versioning}), and Ceph RGW ignores If-None-Match "
            "on versioned buckets: keep the cache in an unversioned bucket (versions only "
            "keep billable copies of disposable blocks)"
        )
    return (
        "Use a store that supports conditional writes (AWS S3, Ceph RGW on an unversioned "
        "bucket, MinIO since 2024, ...)"
    )
