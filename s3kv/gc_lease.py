"""One ``gc`` at a time per location: a lease object, created only if absent.

Two gc runs on one cache would list the same blocks and both delete them, and S3 would
tell both "deleted" (DeleteObjects reports a key that was not there as deleted; AWS
checks a delete's ETag condition, Ceph RGW 16 and moto ignore it), so both would claim
the same frees. A run that deletes therefore first creates ``<prefix>/.s3kv-gc-lease``
with ``If-None-Match: *`` (which every store s3kv writes to enforces): the second run
finds it and stops with :class:`~s3kv.errors.LeaseHeldError`, naming the holder and when
its lease ends. The holder refreshes it while it runs and deletes it at the end; a lease
left by a run that died expires after :data:`LEASE_SECONDS` and is then taken over.
Listings skip the lease (:data:`s3kv.listing.GC_LEASE_NAME`): it is never a stray key.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import time
from datetime import datetime, timezone

from s3kv.errors import LeaseHeldError, ObjectNotFoundError, S3KVError
from s3kv.listing import GC_LEASE_NAME, list_root
from s3kv.location import Location
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import PutOptions, Store

logger = logging.getLogger("s3kv")

LEASE_SECONDS = 15 * 60.0
"""How long a lease holds without a refresh (a run refreses it every third of this)."""
_MAX_LEASE_BYTES = 4096


class GCLease:
    """The lease of one gc run on ``location`` (see the module)."""

    def __init__(self, store: Store, location: Location, settings: S3Settings) -> None:
        self.store, self.settings = store, settings
        self.key = list_root(location) + GC_LEASE_NAME
        self.where = f"{location.url.rstrip('/')}/{GC_LEASE_NAME}"
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._refreshed = 0.0

    def _body(self) -> bytes:
        expires = datetime.fromtimestamp(time.time() + LEASE_SECONDS, timezone.utc)
        return json.dumps({"owner": self.owner, "expires": expires.isoformat()}).encode()

    def _put(self, *, create_only: bool) -> bool:
        body = self._body()
        created = with_retries(
            lambda: self.store.put(self.key, body, PutOptions(create_only=create_only)),
            self.settings,
        )
        if created:
            self._refreshed = time.monotonic()
        return created

    def _read(self) -> tuple[str, datetime] | None:
        """(owner, expiry) of the lease there now; None if there is none. An unreadable
        lease (not one of ours) counts as expired."""
        try:
            data = with_retries(
                lambda: self.store.get_range(self.key, start=0, end=_MAX_LEASE_BYTES),
                self.settings,
            )
        except ObjectNotFoundError:
            return None
        try:
            held = json.loads(data)
            return str(held["owner"]), datetime.fromisoformat(held["expires"])
        except (ValueError, KeyError, TypeError):
            return "?", datetime.fromtimestamp(0, timezone.utc)

    def acquire(self) -> None:
        """Hold the lease, taking over an expired one; else :class:`LeaseHeldError`."""
        if self._put(create_only=True):
            return
        held = self._read()
        if held is not None and held[1] > datetime.now(timezone.utc):
            self._busy(*held)
        # Expired (its run died): remove it, only if it is still the one read, and race
        # any other taker with a create-only write again.
        info = self.store.head(self.key)
        if info is not None:
            with_retries(
                lambda: self.store.delete_if_unchanged([(self.key, info.etag)]), self.settings
            )
        if not self._put(create_only=True):
            held = self._read()
            self._busy(*(held or ("?", datetime.now(timezone.utc))))

    def refresh(self) -> None:
        """Keep holding it (cheap when called often: writes every third of its life)."""
        if time.monotonic() - self._refreshed < LEASE_SECONDS / 3:
            return
        held = self._read()
        if held is None or held[0] != self.owner:
            raise LeaseHeldError(
                f"gc lost its lease {self.where} (taken over after it expired, or removed); "
                "it stopped deleting. Run gc again"
            )
        self._put(create_only=False)

    def release(self) -> None:
        held = self._read()
        if held is not None and held[0] == self.owner:
            # One DeleteObject, not a batch: a store (or a proxy) that fails DeleteObjects
            # answers must not leave the lease to block every gc until it expires.
            try:
                with_retries(lambda: self.store.delete(self.key), self.settings)
            except S3KVError as exc:
                logger.warning(
                    "s3kv gc: could not remove its lease %s (%s); it expires on its own",
                    self.where, exc,
                )

    def _busy(self, owner: str, expires: datetime) -> None:
        raise LeaseHeldError(
            f"another s3kv gc is running on this location: {self.where} is held by {owner} "
            f"until {expires.isoformat(timespec='seconds')} (refreshed while it runs). Run "
            "gc again once it ended; a lease left by a run that died expires then"
        )
