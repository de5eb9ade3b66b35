"""Use and loss of blocks, as the tier sees them: renewals out, removal events in.

The tier's store reports each request to :meth:`UsageTracker.on_request` (its request
hook, :attr:`s3kv.stores.base.Store.on_request`): every HEAD or GET that answers hands its
``Last-Modified``, ETag and checksum to the tracker, and every 404 is checked against what
the tier had seen present. The tracker

* feeds uses to the :class:`~s3kv.ops.gc.renewal.Renewer` (a load's blocks, a lookup's HITs,
  ``touch``), one chain at a time, so last use reaches S3 (see :mod:`s3kv.ops.gc.renewal`);
* turns a 404 for a key the tier had stored, reported or seen present into a removal:
  the key is forgotten by the presence cache and queued for an
  ``OffloadingEvent(removed=True)``, so a router that reads vLLM's KV events stops
  sending requests for it. Each loss is reported once.

A read-only tier has no renewer (readers hold no write right: see docs/vllm-tier.md)
but reports removals all the same.
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Sequence

from s3kv.errors import InvalidInputError, NotAnS3KVKeyError
from s3kv.naming.parse import parse_key
from s3kv.ops.gc.renewal import Renewer
from s3kv.settings import S3Settings
from s3kv.stores.base import ObjectInfo, RequestEvent, Store
from s3kv.transfers.lookup import PresenceCache
from s3kv.transfers.transfer import BLOCK_TAGS
from s3kv.units import parse_duration
from s3kv.vllm._metrics import RENEWAL_OUTCOMES

MAX_PRESENT = 200_000
"""Keys remembered as seen present (for removal events), least recently seen forgotten."""


class UsageTracker:
    """What the tier has seen present, what it used, and what it found gone."""

    def __init__(
        self,
        presence: PresenceCache,
        renewer: Renewer | None = None,
        *,
        announce_removals: bool = False,
    ) -> None:
        self.presence = presence
        self.renewer = renewer
        self.announce_removals = announce_removals
        self.removed = 0
        self._present: OrderedDict[str, None] = OrderedDict()
        self._removals: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls,
        store: Store,
        settings: S3Settings,
        presence: PresenceCache,
        *,
        renew_after: float | None,
        announce_removals: bool,
    ) -> UsageTracker:
        """A tracker with a renewer on ``store`` (none when ``renew_after`` is None)."""
        tracker = cls(presence, announce_removals=announce_removals)
        if renew_after is not None:
            tags = BLOCK_TAGS if settings.tag_blocks else {}
            tracker.renewer = Renewer(
                store, renew_after=renew_after, tags=tags, on_gone=tracker.missing
            )
        return tracker

    def renewal_totals(self) -> dict[tuple[str, ...], float]:
        """The renewer's running totals by outcome, for the tier's metrics."""
        if self.renewer is None:
            return {}
        return {(o,): float(getattr(self.renewer, o)) for o in RENEWAL_OUTCOMES}

    def retag_totals(self) -> dict[tuple[str, ...], float]:
        """Re-tags by outcome: ``failed`` (the block waits for its next use), ``repaired``
        (a block whose re-tag had failed carries its tag again)."""
        if self.renewer is None:
            return {}
        r = self.renewer
        return {("failed",): float(r.retag_failed), ("repaired",): float(r.retagged)}

    def on_request(self, event: RequestEvent) -> None:
        """A request of the tier's store ended: a HEAD or GET that found the object tells
        what it is; one that found nothing, that it is gone (loads, lookups, the manifest's
        checks, the renewer's looks; a renewal's own copy says nothing: its 404 may be a
        changed object)."""
        if event.operation not in ("get", "head"):
            return
        if event.info is not None:
            self.answered(event.info)
        elif event.outcome == "not_found":
            self.missing(event.key)

    def answered(self, info: ObjectInfo) -> None:
        """A HEAD or GET found the object."""
        self.present([info.key])
        if self.renewer is not None:
            self.renewer.observe(info)

    def present(self, keys: Sequence[str]) -> None:
        """Keys known to exist (answered, or stored by this tier)."""
        with self._lock:
            for key in keys:
                self._present[key] = None
                self._present.move_to_end(key)
            while len(self._present) > MAX_PRESENT:
                self._present.popitem(last=False)

    def missing(self, key: str) -> None:
        """A HEAD, GET or renewal answered 404: a removal if the tier had it present."""
        with self._lock:
            was_present = self._present.pop(key, None) is not None
        was_present = was_present or self.presence.get(key) is True
        if self.renewer is not None:
            was_present = was_present or self.renewer.known(key)
            self.renewer.forget(key)
        if not was_present:
            return
        self.presence.forget(key)
        try:
            offload_key = parse_key(key).offload_key
        except NotAnS3KVKeyError:
            return  # the manifest, or a key outside the layout: no block to announce
        with self._lock:
            self.removed += 1
        if self.announce_removals:
            self._removals.put(offload_key)

    def take_removed(self) -> list[bytes]:
        """OffloadKeys found gone since the last call (for ``removed=True`` events)."""
        out = []
        while True:
            try:
                out.append(self._removals.get_nowait())
            except queue.Empty:
                return out

    def used(self, chain: Sequence[str], *, probe_unknown: bool = False) -> None:
        """Object keys of one chain, in chain order, were used (never blocks)."""
        if self.renewer is not None and chain:
            self.renewer.use(chain, probe_unknown=probe_unknown)


def parse_renew_after(value: float | str | None) -> float | None:
    """The tier entry's ``renew_after``: seconds, a duration (``"12h"``, ``"1d"``), or
    ``"off"``/``false``/``None`` for no renewal."""
    if value is None or value is False:
        return None
    if isinstance(value, str):
        if value.strip().lower() in ("off", "false", "none", "no"):
            return None
        try:
            seconds = parse_duration(value)
        except InvalidInputError as exc:
            raise InvalidInputError(f"renew_after: {exc}, or 'off'") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidInputError(
            f"renew_after {value!r} is not a duration; give seconds (86400), a duration "
            "('1d', '12h') or 'off'"
        )
    if not seconds > 0:
        raise InvalidInputError(
            f"renew_after must be positive ({value!r}); give e.g. '1d', or 'off' for no renewal"
        )
    return seconds
