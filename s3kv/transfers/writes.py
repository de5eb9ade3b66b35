"""Create-only writes, counted for what happened, on stores proven to honour them.

Every s3kv write is create-only (``If-None-Match: *``): 412 means the object was there.
Two things can make that count lie, and this module is the one place that handles them:

* **A 412 is not taken on trust.** A write that landed but whose answer was lost (the
  connection dropped after the store kept the object) gets 412 on its retry, and a
  desynchronised connection can hand a write another request's 412. Each block write
  carries a token of its own in metadata (:func:`write_id`); after any 412 a HEAD tells
  (:func:`landed`): the object holding our token is our write, counted stored; another
  object is "already present"; no object at all means the 412 was not the store's answer
  to this write, which is tried again.
* **A store that ignores If-None-Match** (older MinIO, some gateways) overwrites whatever
  is there and answers 200: every write would count "stored" and a racing writer's
  object could be replaced. The first write of a session (the manifest, written before
  any block) proves the store refuses a second create-only PUT of the same bytes; if it
  does not, s3kv refuses to write (:class:`UnsupportedByStoreError`). The probe rewrites
  bytes the object already holds, so it is harmless either way.
"""

from __future__ import annotations

import itertools
import logging
import secrets

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


_PROCESS = secrets.token_hex(4)
_WRITES = itertools.count(1)


def write_id() -> str:
    """A token unique to one write (kept with the object; 16 hex digits): this process's
    random half, then a count (a random token per write cost a system call per block)."""
    return f"{_PROCESS}{next(_WRITES) & 0xFFFFFFFF:08x}"


def put_create_only(
    store: Store,
    key: str,
    data: Buffer,
    options: PutOptions,
    settings: S3Settings,
    *,
    path: str | None = None,
) -> bool:
    """A create-only PUT under the retry policy; True if the object is the one we sent
    and this call stored it (see :func:`landed` for what a 412 means). With ``path``,
    ``data`` is that file's bytes and the store sends the file itself
    (:meth:`s3kv.stores.Store.put_from_path`)."""
    size = len(memoryview(data))

    def attempt() -> bool:
        if path is not None:
            sent = store.put_from_path(key, path, size, options)
        else:
            sent = store.put(key, data, options)
        return sent or landed(store, key, options, size)

    return with_retries(attempt, settings)


def landed(store: Store, key: str, options: PutOptions, size: int) -> bool:
    """What a 412 to a create-only PUT found: our own write (a lost answer: True), or
    another object (False). No object at all means the 412 was not the store's answer to
    this write (a stale answer on a desynchronised connection):
    :class:`TransientStoreError`, and the write is tried again."""
    info = store.head(key)
    if info is None:
        raise TransientStoreError(
            f"PUT {store.name}/{key}: answered 412 (already exists), but no object is "
            "there: not the store's answer to this write; retried"
        )
    if options.write_id is None:
        return False
    return info.size == size and info.write_id == options.write_id


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
