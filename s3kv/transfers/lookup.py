"""Finding how many leading blocks of a chain are stored, in 3 round trips.

vLLM stores a prompt's blocks in order, so presence along a chain is a prefix: present,
present, ..., absent, absent. Each round probes ``fanout`` evenly spaced positions of the
unknown interval at once (k-ary search), which leaves ``1/(fanout + 1)`` of it unknown.
The fanout is chosen so that ``ROUNDS`` rounds always suffice: the smallest ``f >=
MIN_FANOUT`` with ``(f + 1) ** ROUNDS >= n + 1``. The first round also probes both ends,
so a chain stored whole or not at all is settled in one round. Cost: at most
``ROUNDS * f + 2`` HEADs, about ``3 * cbrt(n)``: 256 keys take at most 26 HEADs, 2,048
keys (fanout 12) at most 38, 8,192 keys (fanout 20) at most 62. Fewer rounds would cost
many more requests (2 rounds of 2,048 keys: 44 per round); more rounds add a round trip
of latency each for a few HEADs saved.

A chain can have holes (a store that failed midway). The search then returns a boundary
``b`` where block ``b-1`` was seen present and block ``b`` absent (or ``b == n``); blocks
before ``b`` that were never probed are assumed present. Loading such a claimed block
fails cleanly (it is reported missing), so vLLM recomputes it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

ROUNDS = 3
"""Round trips a lookup takes at most, whatever the chain's length."""

MIN_FANOUT = 8
"""HEADs a round sends at least: short chains finish in fewer rounds instead."""


@dataclass
class LookupStats:
    """Cost of the last lookup: rounds of concurrent probes and requests sent."""

    rounds: int = 0
    requests: int = 0


def fanout_for(n: int, *, rounds: int = ROUNDS) -> int:
    """Probes per round that find the boundary among ``n + 1`` candidates in ``rounds``."""
    fanout = MIN_FANOUT
    while (fanout + 1) ** rounds < n + 1:
        fanout += 1
    return fanout


def prefix_length(
    n: int,
    probe: Callable[[Sequence[int]], Sequence[bool]],
    *,
    stats: LookupStats,
    fanout: int | None = None,
    present_below: int = -1,
    absent_from: int | None = None,
) -> int:
    """The length of the present prefix of ``n`` positions.

    ``probe(positions)`` answers presence for several positions in one round trip.
    ``present_below``/``absent_from`` are positions already known present/absent (a
    cache's answers): the search starts between them. ``fanout`` None: ``fanout_for``
    the unknown span, so the search takes at most ``ROUNDS`` rounds.
    """
    # invariant: lo is known present (or -1), hi known absent (or n)
    lo, hi = present_below, n if absent_from is None else absent_from
    if fanout is None:
        fanout = fanout_for(max(0, hi - lo - 1))
    first = True
    while hi - lo > 1:
        span = hi - lo - 1
        count = min(fanout, span)
        chosen = {lo + 1 + (span * (i + 1)) // (count + 1) for i in range(count)}
        if first:
            # Nothing stored and everything stored are the common answers: settle them in
            # one round for two more HEADs.
            chosen |= {lo + 1, hi - 1}
            first = False
        positions = sorted(p for p in chosen if lo < p < hi) or [lo + 1]
        answers = probe(positions)
        stats.rounds += 1
        new_lo, new_hi = lo, hi
        for position, present in zip(positions, answers):
            if present:
                new_lo = position
            else:
                new_hi = position
                break
        lo, hi = new_lo, new_hi
    return hi


class PresenceCache:
    """Bounded memory of which keys exist.

    Present answers are kept until evicted (create-only blocks do not vanish except by
    gc, and a load of a gc'd block fails cleanly). Absent answers expire after
    ``absent_ttl_seconds``: another writer may store the block any moment.
    """

    def __init__(self, max_entries: int = 200_000, absent_ttl_seconds: float = 2.0) -> None:
        self.max_entries = max_entries
        self.absent_ttl_seconds = absent_ttl_seconds
        self._entries: OrderedDict[str, float] = OrderedDict()  # key -> expiry (inf: present)
        self._lock = threading.Lock()

    def get(self, key: str) -> bool | None:
        with self._lock:
            expiry = self._entries.get(key)
            if expiry is None:
                return None
            if expiry != float("inf") and expiry < time.monotonic():
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return expiry == float("inf")

    def put(self, key: str, present: bool) -> None:
        expiry = float("inf") if present else time.monotonic() + self.absent_ttl_seconds
        with self._lock:
            self._entries[key] = expiry
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def forget(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
