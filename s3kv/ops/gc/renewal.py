"""Renewal: a used block's Last-Modified is kept within ``renew_after`` of its last use.

S3 keeps no access time. The bucket's lifecycle rule, ``gc --older-than`` and
``gc --max-bytes`` all go by ``Last-Modified``, which a create-only write sets once: left
alone they evict by *write* time, so the blocks written first and read most (a fleet's
shared prompts, the head of every chain) would go first. A :class:`Renewer` makes
``Last-Modified`` mean "last used", for every node of a fleet, with no service of its own:

* it is told what a HEAD or GET answered (:meth:`Renewer.observe`: ``Last-Modified``,
  ETag, s3kv's checksum) and which blocks were used (:meth:`Renewer.use`, one chain at a
  time, in chain order);
* a used block whose ``Last-Modified`` is older than ``renew_after`` is renewed: a
  server-side copy onto itself with the same metadata (:meth:`Store.renew`; no bytes
  through the client); only blocks s3kv wrote (they carry its checksum): another tool's
  metadata is not s3kv's to rewrite;
* a chain is renewed together: every block up to the last one due, so an earlier block
  is never much older than a later one it was used with;
* **at most once per block per** ``renew_after``, fleet-wide in the common case: a key
  is queued once per node per threshold and never twice while it waits; right before
  the copy, a HEAD looks (one GET-class request, a twelfth of a copy's price): a block
  another node renewed since this one saw it is left alone (``already_renewed``). The
  copy itself is conditional on the Last-Modified that HEAD read, which AWS, MinIO and
  Ceph RGW enforce: a copy after another node's is refused (two reaching the store at
  the same moment can both land: one extra copy, no harm);
* tags: where a copy keeps the object's tags (AWS, MinIO, moto), nothing more is sent;
  where it drops them (Ceph RGW 16), they are put back at once. A block whose re-tag
  failed would never match the lifecycle rule: it is remembered and re-tagged at its
  next use (``retag_failed``, ``retagged``; logged), and ``s3kv verify --tags`` finds
  any left;
* never on the caller's thread, never in a load's way: :meth:`use` only queues, and
  :mod:`s3kv.ops.gc.renewal_queue` runs the work with a spread start, a budget per chain and in
  all, and one pause for every renewal when the store throttles.

The counters are running totals for metrics (``RENEWAL_OUTCOMES``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from s3kv.errors import (
    AccessDeniedError,
    ObjectNotFoundError,
    S3KVError,
    StorePausedError,
    TransientStoreError,
)
from s3kv.integrity import Checksum
from s3kv.ops.gc.renewal_queue import RenewalQueue, Task
from s3kv.retry import ATTEMPT
from s3kv.stores.base import ObjectDetails, ObjectInfo, Store

logger = logging.getLogger("s3kv.renewal")

DEFAULT_RENEW_AFTER_SECONDS = 86_400.0
"""One day: with the Terraform rule's default of 7 days since last use, a block used
now is kept at least 6 and at most 7 days; one copy per used block per day at most."""
CONCURRENCY = 8
"""Keys looked at and renewed at once, over every chain (the tier's control-plane
connections are shared with nothing else on the default data path)."""
CHAIN_BUDGET = 4
"""Keys of one chain in flight at once."""
SPREAD_SECONDS = 10.0
"""Each renewal waits a random 0 to this many seconds (a tenth of ``renew_after`` at
most; see :mod:`s3kv.ops.gc.renewal_queue`): two nodes that queued a block at the same moment
then look at it about 5 s apart, while a look and a copy take a few round trips."""
MIN_AGE_SECONDS = 1.0
"""A block modified within the second its look was answered in is not renewed: the
copy's condition tells whole seconds apart, so a write after the look must fall in a
later second than the Last-Modified the condition names."""
ATTEMPTS = 3
"""Tries of one renewal through throttling or failures, each after the shared pause."""
MAX_PENDING = 100_000
"""Keys waiting to be renewed at most; uses beyond it are dropped (and counted)."""
MAX_SEEN = 200_000
"""Answers (Last-Modified, ETag, checksum) remembered, least recently seen forgotten."""
RETAG_LOG_SECONDS = 60.0
"""Failed re-tags are logged at most this often (with their count)."""


@dataclass(frozen=True, slots=True)
class Seen:
    """What a HEAD or GET last said about an object."""

    last_modified: float
    """Seconds since the epoch."""
    etag: str | None
    checksum: Checksum | None


@dataclass(frozen=True, slots=True)
class _Ask:
    seen: Seen | None
    """What was known when queued; None: look first (a probe, ``touch``)."""
    due: bool
    """The block itself was due (else renewed with a due later block of its chain)."""
    retag_only: bool = False


class Renewer:
    """Renews used objects of one store whose ``Last-Modified`` is older than
    ``renew_after`` seconds (see the module). ``on_gone(key)`` runs, on a renewal
    thread, for an object found gone. ``tags`` are the tags the objects carry (s3kv's
    block tag), put back on stores whose copies drop them.
    """

    def __init__(
        self,
        store: Store,
        *,
        renew_after: float = DEFAULT_RENEW_AFTER_SECONDS,
        tags: Mapping[str, str],
        on_gone: Callable[[str], None] | None = None,
        workers: int = CONCURRENCY,
        chain_budget: int = CHAIN_BUDGET,
        spread: float = SPREAD_SECONDS,
        max_pending: int = MAX_PENDING,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not renew_after > 0:
            raise ValueError(f"renew_after must be positive; got {renew_after}")
        self.store = store
        self.renew_after = float(renew_after)
        self.tags = dict(tags)
        self.on_gone = on_gone
        self._clock = clock
        self.renewed = self.already_renewed = self.changed = self.gone = 0
        self.failed = self.dropped = self.heads = self.retagged = self.retag_failed = 0
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, Seen] = OrderedDict()
        self._asked: OrderedDict[str, float] = OrderedDict()  # key -> when it was queued
        self._untagged: OrderedDict[str, None] = OrderedDict()
        self._copies_keep_tags: bool | None = None if self.tags else True
        self._learning = False
        self._retag_logged = 0.0
        self._disabled = ""
        self.queue = RenewalQueue(
            self._work,
            concurrency=workers,
            chain_budget=chain_budget,
            spread=min(spread, self.renew_after / 10),
            max_pending=max_pending,
        )

    # -- what the caller tells -----------------------------------------------------------

    def observe(self, info: ObjectInfo) -> None:
        """A HEAD or GET answered: remember what it said (no request)."""
        if info.last_modified is None:
            return
        seen = Seen(info.last_modified.timestamp(), info.etag, info.checksum)
        with self._lock:
            self._seen[info.key] = seen
            self._seen.move_to_end(info.key)
            if len(self._seen) > MAX_SEEN:
                self._seen.popitem(last=False)

    def known(self, key: str) -> bool:
        """Whether a HEAD or GET said the object exists (and nothing since said otherwise)."""
        with self._lock:
            return key in self._seen

    def forget(self, key: str) -> None:
        with self._lock:
            self._seen.pop(key, None)

    @property
    def untagged(self) -> int:
        """Blocks whose re-tag failed and that have not been re-tagged since."""
        with self._lock:
            return len(self._untagged)

    def use(self, chain: Sequence[str], *, probe_unknown: bool = False) -> int:
        """The keys of one chain (in chain order) were used; returns how many were queued.

        Every known key up to the last one due is queued. Keys with no answer seen are
        skipped, or with ``probe_unknown`` queued to be looked at and renewed if due
        (``touch`` of blocks this node never read). A block whose re-tag failed is
        queued to be re-tagged, due or not. Never blocks on I/O.
        """
        now = self._clock()
        with self._lock:
            if self._disabled:
                return 0
            self._prune(now)
            picked: list[tuple[str, _Ask]] = []
            retags: list[tuple[str, _Ask]] = []
            last_due = -1
            for key in chain:
                if key in self._untagged:
                    retags.append((key, _Ask(None, False, retag_only=True)))
                    continue
                if key in self._asked:
                    continue  # renewed (or queued) by this node within renew_after
                seen = self._seen.get(key)
                if seen is None:
                    if probe_unknown:
                        picked.append((key, _Ask(None, True)))
                    continue
                if seen.checksum is None:
                    continue  # not written by s3kv: its metadata is not ours to rewrite
                due = now - seen.last_modified >= self.renew_after
                if due:
                    last_due = len(picked)
                picked.append((key, _Ask(seen, due)))
            # Up to the last due key: an earlier block renewed with it is never older.
            batch = [p for i, p in enumerate(picked) if i <= last_due or p[1].seen is None]
        if not batch and not retags:
            return 0
        queued = self.queue.push(batch[::-1] + retags)
        if queued is None:  # the queue is full: renewal is an optimisation, drop it
            self._count("dropped", len(batch))
            return 0
        with self._lock:
            for key, _ in batch:
                self._asked[key] = now
            while len(self._asked) > MAX_SEEN:
                self._asked.popitem(last=False)
        return queued

    def _prune(self, now: float) -> None:
        while self._asked:
            key, when = next(iter(self._asked.items()))
            if now - when < self.renew_after:
                return
            del self._asked[key]

    # -- lifecycle -----------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or in flight; False on timeout."""
        return self.queue.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop renewing: what is queued is dropped (it is only an optimisation)."""
        self.queue.close(timeout)

    # -- the renewal threads -------------------------------------------------------------

    def _count(self, counter: str, by: int = 1) -> None:
        with self._lock:
            setattr(self, counter, getattr(self, counter) + by)

    def _work(self, task: Task) -> bool:
        """One key: look, then renew or re-tag; True when queued again after a pause."""
        if self._disabled:
            return False
        ask: _Ask = task.payload
        token = ATTEMPT.set(task.attempts + 1)  # the attempt its requests report
        try:
            if ask.retag_only:
                self._retag(task.key, queued=True)
            else:
                self._renew(task.key, ask)
            self.queue.succeeded()
        except NotImplementedError as exc:
            self._disable(str(exc))
        except AccessDeniedError as exc:
            self._count("failed")
            self._disable(
                f"{exc} (renewal copies each used block onto itself: it needs the writer "
                "policy's s3:PutObject and s3:GetObjectTagging/PutObjectTagging)"
            )
        except TransientStoreError as exc:
            wait = self.queue.pause(exc.retry_after)
            if task.attempts + 1 < ATTEMPTS:
                logger.debug(
                    "s3kv renewal of %s: %s; every renewal pauses %.1fs", task.key, exc, wait
                )
                self.queue.retry(task)
                return True
            self._count("failed")
            logger.warning("s3kv renewal of %s failed: %s", task.key, exc)
        except S3KVError as exc:
            self._count("failed")
            logger.warning("s3kv renewal of %s failed: %s", task.key, exc)
        finally:
            ATTEMPT.reset(token)
        return False

    def _renew(self, key: str, ask: _Ask) -> None:
        look = self._look(key)
        if look is None:
            return
        info = look.info
        assert info.last_modified is not None
        modified = info.last_modified.timestamp()
        if ask.seen is not None and int(modified) > int(ask.seen.last_modified):
            # Renewed by another node since this one saw it (or written again).
            self._count("changed" if info.etag != ask.seen.etag else "already_renewed")
            return
        now = look.server_time.timestamp() if look.server_time else self._clock()
        if ask.seen is None and now - modified < self.renew_after:
            return  # a probed key that is not due
        if now - modified < MIN_AGE_SECONDS:
            return
        learn = self._copies_keep_tags is None and self._start_learning()
        before = self.store.get_tags(key) if learn else None
        when = self.store.renew(key, unmodified_since=info.last_modified, metadata=look.metadata)
        if when is None:  # its condition failed: gone, renewed elsewhere, or rewritten
            self._look(key, after_copy=True, etag=info.etag)
            if learn:
                self._learning = False
            return
        self._count("renewed")
        self.observe(ObjectInfo(key, info.size, when, info.checksum, info.etag))
        if learn:
            self._learn_tags(key, before)
        elif self._copies_keep_tags is not True:  # dropped, or not known yet: put back
            self._retag(key)

    def _look(
        self, key: str, *, after_copy: bool = False, etag: str | None = None
    ) -> ObjectDetails | None:
        """A HEAD: what is there now (None: gone, or not s3kv's)."""
        self._count("heads")
        look = self.store.describe(key)
        if look is None:
            self._count("gone")
            self.forget(key)
            if self.on_gone is not None:
                self.on_gone(key)
            return None
        self.observe(look.info)
        if after_copy:
            self._count("changed" if look.info.etag != etag else "already_renewed")
            return None
        if look.info.checksum is None or look.info.last_modified is None:
            return None  # not written by s3kv (any more): not ours to rewrite
        return look

    # -- tags ----------------------------------------------------------------------------

    def _start_learning(self) -> bool:
        with self._lock:
            if self._learning:
                return False
            self._learning = True
            return True

    def _learn_tags(self, key: str, before: dict[str, str] | None) -> None:
        """After the first renewal: does a copy keep the tags? (Ceph RGW 16 drops them.)
        A look that fails leaves it unknown; the block is re-tagged (or remembered as
        untagged), since the copy may have dropped its tag."""
        try:
            try:
                after = self.store.get_tags(key)
            except AccessDeniedError:
                raise
            except S3KVError:
                self._retag(key)
                return
            if before is None or after is None:
                self._copies_keep_tags = True  # a store without tags
            elif before == self.tags:
                self._copies_keep_tags = after == self.tags
                logger.info(
                    "s3kv renewal: copies on %s %s the block tag",
                    self.store.name,
                    "keep" if self._copies_keep_tags else "drop (re-tagged after each)",
                )
            if after is not None and after != self.tags:
                self._retag(key)
        finally:
            self._learning = False

    def _retag(self, key: str, *, queued: bool = False) -> None:
        """Put the block tag back; on failure remember the key (re-tagged at next use).
        ``queued``: a re-tag of its own in the queue (not part of a renewal), which a
        paused store makes wait, not fail."""
        try:
            self.store.put_tags(key, self.tags)
        except AccessDeniedError:
            raise
        except StorePausedError:
            if queued:  # nothing was sent: the queue waits for the pause and tries again
                raise
            self._untag(key, "not sent: the store is paused")
            return
        except ObjectNotFoundError:  # gone meanwhile: nothing left to tag
            with self._lock:
                self._untagged.pop(key, None)
            return
        except S3KVError as exc:
            self._untag(key, str(exc))
            return
        with self._lock:
            was_untagged = self._untagged.pop(key, 0) is None
        if was_untagged:
            self._count("retagged")

    def _untag(self, key: str, why: str) -> None:
        """A re-tag failed: counted, remembered for the next use, logged now and then."""
        self._count("retag_failed")
        with self._lock:
            self._untagged[key] = None
            while len(self._untagged) > MAX_SEEN:
                self._untagged.popitem(last=False)
            now, count = time.monotonic(), len(self._untagged)
            tell = now - self._retag_logged >= RETAG_LOG_SECONDS
            if tell:
                self._retag_logged = now
        if tell:
            logger.warning(
                "s3kv renewal: re-tagging %s failed (%s): the lifecycle rule cannot see "
                "it until it is re-tagged at its next use; %d block(s) wait for that "
                "('s3kv verify --tags' lists them, 's3kv repair --tags' fixes them)",
                key,
                why,
                count,
            )

    def _disable(self, why: str) -> None:
        with self._lock:
            if self._disabled:
                return
            self._disabled = why
        self.queue.clear()
        logger.warning("s3kv renewal is off for %s: %s", self.store.name, why)
