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
  server-side copy onto itself with the same metadata and tags (:meth:`Store.renew`; no
  bytes through the client), only while its ETag is still the one seen; only blocks
  s3kv wrote (they carry its checksum, their only metadata): another tool's metadata is
  not s3kv's to rewrite;
* a chain is renewed together and from its tail: every block up to the last one due is
  renewed in one batch, later blocks first, so an earlier block is never older than a
  later one it was used with (a chain dies from the tail);
* at most once per block per ``renew_after`` from one node; a node that sees the renewed
  ``Last-Modified`` in its own HEAD or GET does not renew again, so a fleet sends about
  one copy per used block per ``renew_after``;
* never on the caller's thread: :meth:`use` only queues (a bounded queue; what does not
  fit is dropped and counted); one thread takes chains in batches and renews a few
  chains at once, each chain one copy at a time from its tail, so that within a second
  too a chain's earlier blocks carry the later times.

The counters (``renewed``, ``changed``, ``gone``, ``failed``, ``dropped``, ``heads``) are
running totals for metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from s3kv.errors import AccessDeniedError, S3KVError
from s3kv.integrity import Checksum
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores.base import ObjectInfo, Store

logger = logging.getLogger("s3kv.renewal")

DEFAULT_RENEW_AFTER_SECONDS = 86_400.0
"""One day: with the Terraform rule's default of 7 days since last use, a block used
now is kept at least 6 and at most 7 days; one copy per used block per day at most."""
WORKERS = 4
"""Chains renewed at once, each one copy at a time, tail first: renewal is background
work, never a load's competitor, and a chain's copies land in order."""
BATCH = 256
"""Keys (in whole chains) one round of the renewal thread takes from the queue."""
MAX_PENDING = 100_000
"""Keys waiting to be renewed at most; uses beyond it are dropped (and counted)."""
MAX_SEEN = 200_000
"""Answers (Last-Modified, ETag, checksum) remembered, least recently seen forgotten."""


@dataclass(frozen=True, slots=True)
class Seen:
    """What a HEAD or GET last said about an object."""

    last_modified: float
    """Seconds since the epoch."""
    etag: str | None
    checksum: Checksum | None


class Renewer:
    """Renews used objects of one store whose ``Last-Modified`` is older than
    ``renew_after`` seconds (see the module). ``on_gone(key)`` runs, on the renewal
    thread, for an object found gone while being renewed. ``tags`` are the tags the
    objects carry (s3kv's block tag), restored on stores whose copies drop them.
    """

    def __init__(
        self,
        store: Store,
        settings: S3Settings,
        *,
        renew_after: float = DEFAULT_RENEW_AFTER_SECONDS,
        tags: Mapping[str, str],
        on_gone: Callable[[str], None] | None = None,
        workers: int = WORKERS,
        max_pending: int = MAX_PENDING,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not renew_after > 0:
            raise ValueError(f"renew_after must be positive; got {renew_after}")
        self.store = store
        self.settings = settings
        self.renew_after = float(renew_after)
        self.tags = dict(tags)
        self.on_gone = on_gone
        self.max_pending = max_pending
        self._clock = clock
        self.renewed = self.changed = self.gone = self.failed = self.dropped = self.heads = 0
        self._lock = threading.Condition()
        self._seen: OrderedDict[str, Seen] = OrderedDict()
        self._asked: OrderedDict[str, float] = OrderedDict()  # key -> when it was queued
        self._queue: deque[list[tuple[str, Seen | None]]] = deque()  # chains, tail first
        self._queued = 0  # keys in _queue
        self._busy = 0
        self._closing = False
        self._disabled = ""
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="s3kv_renew")
        self._thread = threading.Thread(target=self._run, name="s3kv_renewal", daemon=True)
        self._thread.start()

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

    def use(self, chain: Sequence[str], *, probe_unknown: bool = False) -> int:
        """The keys of one chain (in chain order) were used; returns how many were queued.

        Every known key up to the last one due is queued, tail first. Keys with no answer
        seen are skipped, or with ``probe_unknown`` queued to be HEADed and renewed if due
        (``touch`` of blocks this node never read). Never blocks on I/O.
        """
        now = self._clock()
        with self._lock:
            if self._closing or self._disabled:
                return 0
            self._prune(now)
            picked: list[tuple[str, Seen | None]] = []
            last_due = -1
            for key in chain:
                if key in self._asked:
                    continue  # renewed (or queued) by this node within renew_after
                seen = self._seen.get(key)
                if seen is None:
                    if probe_unknown:
                        picked.append((key, None))
                    continue
                if seen.checksum is None:
                    continue  # not written by s3kv: its metadata is not ours to rewrite
                if now - seen.last_modified >= self.renew_after:
                    last_due = len(picked)
                picked.append((key, seen))
            # Up to the last due key: an earlier block renewed with it is never older.
            batch = [p for i, p in enumerate(picked) if i <= last_due or p[1] is None]
            if not batch:
                return 0
            if self._queued + len(batch) > self.max_pending:
                self.dropped += len(batch)
                return 0
            for key, _ in batch:
                self._asked[key] = now
            while len(self._asked) > MAX_SEEN:
                self._asked.popitem(last=False)
            self._queue.append(batch[::-1])  # tail first (see the module)
            self._queued += len(batch)
            self._lock.notify_all()
            return len(batch)

    def _prune(self, now: float) -> None:
        while self._asked:
            key, when = next(iter(self._asked.items()))
            if now - when < self.renew_after:
                return
            del self._asked[key]

    # -- lifecycle -----------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or in flight; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop renewing: what is queued is dropped (it is only an optimisation)."""
        with self._lock:
            self._closing = True
            self._queue.clear()
            self._queued = 0
            self._lock.notify_all()
        self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the renewal thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._queue or self._closing)
                if self._closing:
                    return
                batch = [self._queue.popleft()]
                while self._queue and sum(map(len, batch)) + len(self._queue[0]) <= BATCH:
                    batch.append(self._queue.popleft())
                self._busy = sum(map(len, batch))
                self._queued -= self._busy
            try:
                list(self._pool.map(self._renew_chain, batch))
            except RuntimeError:  # the pool shut down under us (close)
                return
            finally:
                with self._lock:
                    self._busy = 0
                    self._lock.notify_all()

    def _count(self, counter: str) -> None:
        with self._lock:
            setattr(self, counter, getattr(self, counter) + 1)

    def _renew_chain(self, chain: list[tuple[str, Seen | None]]) -> None:
        # One copy at a time, tail first: each block's new Last-Modified is no later
        # than the one before it in the chain, even within one second.
        for item in chain:
            if self._disabled or self._closing:
                return
            self._renew_one(item)

    def _renew_one(self, item: tuple[str, Seen | None]) -> None:
        key, known = item
        try:
            seen = known
            if seen is None:  # a probed key: renewed only if it exists, is s3kv's, and is due
                seen = self._probe(key)
                if seen is None or seen.checksum is None:
                    return
                if self._clock() - seen.last_modified < self.renew_after:
                    return
            when = with_retries(
                lambda: self.store.renew(
                    key, etag=seen.etag, checksum=seen.checksum, tags=self.tags
                ),
                self.settings,
            )
            if when is None:
                self._not_renewed(key)
                return
            self._count("renewed")
            self.observe(ObjectInfo(key, 0, when, seen.checksum, seen.etag))
        except NotImplementedError as exc:
            self._disable(str(exc))
        except AccessDeniedError as exc:
            self._count("failed")
            self._disable(
                f"{exc} (renewal copies each used block onto itself: it needs the writer "
                "policy's s3:PutObject and s3:GetObjectTagging/PutObjectTagging)"
            )
        except S3KVError as exc:
            self._count("failed")
            logger.warning("s3kv renewal of %s failed: %s", key, exc)

    def _probe(self, key: str) -> Seen | None:
        self._count("heads")
        info = with_retries(lambda: self.store.head(key), self.settings)
        if info is None:
            return None
        self.observe(info)
        with self._lock:
            return self._seen.get(key)

    def _not_renewed(self, key: str) -> None:
        """The copy's condition failed: the object is gone, or another one than seen."""
        self._count("heads")
        info = with_retries(lambda: self.store.head(key), self.settings)
        if info is None:
            self._count("gone")
            self.forget(key)
            if self.on_gone is not None:
                self.on_gone(key)
        else:
            self._count("changed")  # re-written meanwhile: its fresh answer says when
            self.observe(info)

    def _disable(self, why: str) -> None:
        with self._lock:
            if self._disabled:
                return
            self._disabled = why
            self._queue.clear()
            self._queued = 0
        logger.warning("s3kv renewal is off for %s: %s", self.store.name, why)
