"""One ``gc`` at a time per location: a lease object, on the store's clock.

Two gc runs on one cache would list the same blocks and both delete them, and S3 would
tell both "deleted" (DeleteObjects reports a key that was not there as deleted; AWS
checks a delete's ETag condition, Ceph RGW 16 and moto ignore it), so both would claim
the same frees. A run that deletes therefore first creates ``<prefix>/.s3kv-gc-lease``
with ``If-None-Match: *`` (which every store s3kv writes to enforces): a second run finds
it and stops with :class:`~s3kv.errors.LeaseHeldError`, naming the holder and its age.

Time is the store's, never a host's: a lease's age is the store's ``Date`` when it is
read minus its ``Last-Modified``, both stamped by the store, so a host whose clock is
20 minutes behind or a day ahead reads the same age as any other (a directory: this
machine's clock). A lease not written again for :data:`LEASE_SECONDS` has expired (its
run died) and the next run takes it over. What the lease holds (holder, host, pid,
start) is only shown: a lease that cannot be read is still a lease by its age, and an
error says so, with the fix, while it holds.

The holder checks the lease right before every delete batch (one HEAD): if it is no
longer the object it wrote (taken over, or broken with ``gc --break-lease``), the run
stops before deleting more. It writes it again (``If-Match`` its own) once a third of
its life has passed, and deletes it at the end. Listings skip the lease
(:data:`s3kv.transfers.listing.GC_LEASE_NAME`): it is never a stray key.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from s3kv.errors import AccessDeniedError, LeaseHeldError, ObjectNotFoundError, S3KVError
from s3kv.naming.location import Location, parse_location
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import PutOptions, Store, open_store
from s3kv.stores.base import ObjectDetails
from s3kv.transfers.listing import GC_LEASE_NAME, list_root
from s3kv.transfers.stored_manifest import read_capped

logger = logging.getLogger("s3kv")

LEASE_SECONDS = 15 * 60.0
"""How long a lease holds without being written again, by the store's clock."""
REFRESH_SECONDS = LEASE_SECONDS / 3
_MAX_LEASE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """A lease as found: who holds it and for how long, by the store's clock."""

    where: str
    holder: str
    """``host (pid N)`` from its body, or why the body could not be read."""
    age_seconds: float
    etag: str | None
    readable: bool = True

    @property
    def expired(self) -> bool:
        return self.age_seconds >= LEASE_SECONDS

    def describe(self) -> str:
        left = LEASE_SECONDS - self.age_seconds
        ends = f"it expires in {_duration(left)}" if left > 0 else "it has expired"
        return (
            f"{self.where} is held by {self.holder}, last written {_duration(self.age_seconds)}"
            f" ago by the store's clock ({ends} unless its holder writes it again)"
        )


class GCLease:
    """The lease of one gc run on ``location`` (see the module)."""

    def __init__(self, store: Store, location: Location, settings: S3Settings) -> None:
        self.store, self.settings = store, settings
        self.key = list_root(location) + GC_LEASE_NAME
        self.where = f"{location.url.rstrip('/')}/{GC_LEASE_NAME}"
        self.location = location.url
        self.token = secrets.token_hex(8)
        self.body = json.dumps(
            {
                "owner": f"{socket.gethostname()}:{os.getpid()}:{self.token}",
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "lease_seconds": LEASE_SECONDS,
            }
        ).encode()
        self.etag: str | None = None
        self.written = 0.0
        """Our last write's Last-Modified (seconds since the epoch, the store's clock)."""
        self.checks = 0
        self.held = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._lost: LeaseHeldError | None = None

    # -- reading -------------------------------------------------------------------------

    def read(self) -> LeaseInfo | None:
        """The lease there now (its age by the store's clock); None if there is none."""
        details = with_retries(lambda: self.store.describe(self.key), self.settings)
        if details is None:
            return None
        info = details.info
        now = details.server_time or datetime.now(timezone.utc)
        age = (now - info.last_modified).total_seconds() if info.last_modified else 0.0
        try:
            data = with_retries(
                lambda: self.store.get_range(self.key, start=0, end=_MAX_LEASE_BYTES),
                self.settings,
            )
        except ObjectNotFoundError:
            return None
        holder, readable = _holder(data)
        return LeaseInfo(self.where, holder, max(0.0, age), info.etag, readable)

    # -- holding -------------------------------------------------------------------------

    def acquire(self) -> None:
        """Hold the lease, taking over an expired one; else :class:`LeaseHeldError`.
        Held, it is kept written while the run lists and reads, between delete batches."""
        self._take()
        threading.Thread(target=self._keep, name="s3kv-gc-lease", daemon=True).start()

    def _keep(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS / 5):
            try:
                self.check()
            except LeaseHeldError as exc:
                self._lost = exc
                return
            except S3KVError as exc:  # the next check (before a delete batch) decides
                logger.debug("s3kv gc: keeping the lease: %s", exc)

    def _take(self) -> None:
        try:
            if self._create():
                return
            held = self.read()
            if held is not None and not held.expired:
                raise LeaseHeldError(_busy(held, self.location))
            if held is not None:  # its run died: remove it, only if it is still that one
                with_retries(
                    lambda: self.store.delete_if_unchanged([(self.key, held.etag)]),
                    self.settings,
                )
            if not self._create():
                again = self.read()
                if again is None:
                    raise LeaseHeldError(f"{self.where} came and went while gc took it; run again")
                raise LeaseHeldError(_busy(again, self.location))
        except AccessDeniedError as exc:
            raise AccessDeniedError(
                f"gc may not write at {self.location} ({exc}). gc deletes blocks and first "
                f"writes its lease {self.where}: run it with credentials that may write and "
                "delete under the prefix (Terraform's writer policy); these look like a "
                "reader's."
            ) from None

    def check(self) -> None:
        """Right before a delete batch: still ours (one HEAD), written again when due;
        else :class:`LeaseHeldError` (the run stops deleting)."""
        if self._lost is not None:
            raise self._lost
        with self._lock:
            self._check()

    def _ours(self, details: ObjectDetails | None = None) -> bool:
        """Whether the lease there now is the one this run wrote."""
        if details is None:
            details = with_retries(lambda: self.store.describe(self.key), self.settings)
        if details is None:
            return False
        if self.etag is None:  # a directory: no ETag, the bytes tell
            try:
                return read_capped(self.store, self.key, self.settings) == self.body
            except ObjectNotFoundError:
                return False
        return details.info.etag == self.etag

    def _check(self) -> None:
        self.checks += 1
        details = with_retries(lambda: self.store.describe(self.key), self.settings)
        if details is None or not self._ours(details):
            raise LeaseHeldError(
                f"gc lost its lease {self.where} (broken with --break-lease, or taken over "
                "after it expired): it stopped before deleting more. What it deleted stays "
                "deleted; run gc again"
            )
        now = (details.server_time or datetime.now(timezone.utc)).timestamp()
        if now - self.written >= REFRESH_SECONDS:
            options = PutOptions(create_only=False, if_match=_bare(self.etag))
            if not with_retries(
                lambda: self.store.put(self.key, self.body, options), self.settings
            ):
                raise LeaseHeldError(f"gc lost its lease {self.where} while writing it again")
            self._remember()

    def release(self) -> None:
        self._stop.set()
        if not self.held:  # a run that never took the lease leaves it alone
            return
        try:
            if self._ours():
                # One DeleteObject, not a batch: a store (or a proxy) that fails
                # DeleteObjects answers must not leave the lease to block every gc.
                with_retries(lambda: self.store.delete(self.key), self.settings)
        except S3KVError as exc:
            logger.warning(
                "s3kv gc: could not remove its lease %s (%s); it expires on its own in %s",
                self.where, exc, _duration(LEASE_SECONDS),
            )

    def break_(self, held: LeaseInfo) -> bool:
        """Remove the lease ``held`` (only while it is still that object); False if it
        went or changed meanwhile."""
        failed, gone = with_retries(
            lambda: self.store.delete_if_unchanged([(self.key, held.etag)]), self.settings
        )
        if failed:
            raise S3KVError(f"could not remove {self.where}: {failed[self.key]}")
        return self.key not in gone

    def _create(self) -> bool:
        created = with_retries(
            lambda: self.store.put(self.key, self.body, PutOptions(create_only=True)),
            self.settings,
        )
        if created:
            self._remember()
        return created

    def _remember(self) -> None:
        """Our write's ETag and time, read back with the body (one GET: both agree)."""
        data, info = with_retries(
            lambda: self.store.get(self.key, max_bytes=_MAX_LEASE_BYTES), self.settings
        )
        if data != self.body:
            raise LeaseHeldError(f"{self.where} was taken over right after gc wrote it; run again")
        self.etag = info.etag
        self.written = info.last_modified.timestamp() if info.last_modified else 0.0
        self.held = True


def release_and_close(lease: GCLease | None, store: Store) -> None:
    """The end of a deleting job: its lease released (if it took one), then its store
    closed, whatever the release met."""
    try:
        if lease is not None:
            lease.release()
    finally:
        store.close()


def _holder(data: bytes) -> tuple[str, bool]:
    try:
        held = json.loads(data)
        host, pid = held.get("host"), held.get("pid")
        if isinstance(host, str) and isinstance(pid, int):
            return f"{host} (pid {pid})", True
        owner = held["owner"]
        if isinstance(owner, str):
            return owner, True
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    shown = data[:60].decode("utf-8", "replace").replace("\n", " ")
    return f"an unreadable lease ({shown!r}: not one s3kv wrote)", False


def _busy(held: LeaseInfo, location: str) -> str:
    if not held.readable:
        return (
            f"{held.describe()}. gc cannot tell who wrote it; if no gc runs on {location}, "
            f"remove it: s3kv gc {location} --break-lease"
        )
    return (
        f"another s3kv gc is running on this location: {held.describe()}. Run gc again once "
        f"it ended; if you know it died: s3kv gc {location} --break-lease"
    )


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _bare(etag: str | None) -> str | None:
    """Ceph RGW 16 matches If-Match only without quotes (see s3kv.ops.damage)."""
    return etag.strip('"') if etag is not None else None


def break_lease(
    location: str | Location,
    *,
    settings: S3Settings | None = None,
    confirm: Callable[[LeaseInfo], bool] = lambda _: True,
) -> tuple[LeaseInfo | None, bool]:
    """Remove the gc lease at ``location`` once ``confirm(lease)`` agrees: (the lease
    found or None, whether it was removed). A gc still running stops before its next
    delete batch (it checks its lease first)."""
    loc = location if isinstance(location, Location) else parse_location(location)
    settings = settings if settings is not None else S3Settings.resolve()
    store = open_store(loc, settings)
    try:
        lease = GCLease(store, loc, settings)
        held = lease.read()
        if held is None or not confirm(held):
            return held, False
        return held, lease.break_(held)
    finally:
        store.close()
