"""Load only when it pays: what a load of ``n`` bytes would take at this store, now.

The model has two terms, both measured by the tier as it works:

    seconds(n) = first_byte + n * per_byte

* ``first_byte``: how long the store takes to answer a look (the lookups' presence
  requests), a moving average;
* ``per_byte``: the rest of a load job's time per byte, a moving average over finished
  load jobs (all their blocks at once: the store's concurrency is in it). A job cancelled
  when its request's budget ran out needed more than it had: its time per byte is a floor
  of the truth, and the estimate is raised to at least that.

A lookup whose hits would take longer to load than the request's budget has left
(:data:`MARGIN` of it: a load that ends just in time still made the request wait its
whole budget before the recompute it saved) answers MISS for the whole request, so vLLM
recomputes at once (``skipped_lookups{reason="slow_store"}``). Then, at most every
:data:`PROBE_SECONDS`, one ranged GET of a block seen present (:data:`PROBE_BYTES` at
most) measures one stream in the background, where no request waits; once one stream
alone would load such a request in time, the estimate is reset to it, and loads resume.
An estimate older than :data:`MEMORY_SECONDS` is forgotten (the next load tries again).
With no estimate yet, every load is tried.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from s3kv.errors import S3KVError
from s3kv.stores.base import RequestEvent

ALPHA = 0.3
"""Weight of a new sample in the moving averages."""

MARGIN = 0.8
"""A load must be expected to end within this share of the budget left."""

PROBE_SECONDS = 1.0
PROBE_BYTES = 1 << 20
MEMORY_SECONDS = 60.0


def _average(old: float | None, sample: float) -> float:
    return sample if old is None else ALPHA * sample + (1 - ALPHA) * old


class LoadCost:
    """The load model of one tier (thread-safe enough: each field is one assignment).

    ``read(key, nbytes)`` reads ``nbytes`` of a stored block (the background probe).
    """

    def __init__(
        self,
        read: Callable[[str, int], object] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.first_byte: float | None = None
        self.per_byte: float | None = None
        self.clock = clock
        self._read = read
        self._measured_at = 0.0
        self._seen: tuple[str, int] | None = None  # a block known present, and its size
        self._probing = threading.Lock()
        self._probed_at = float("-inf")
        self._wanted: float | None = None  # per_byte that would have let the last decline load

    def on_request(self, event: RequestEvent) -> None:
        """A request of the tier's store ended (its hook): looks time the first byte."""
        if event.operation == "head" and event.outcome in ("ok", "not_found"):
            self.first_byte = _average(self.first_byte, event.seconds)
        if event.info is not None and event.key.endswith(".bin") and event.info.size > 0:
            self._seen = (event.key, event.info.size)

    def on_load(self, nbytes: int, seconds: float, *, finished: bool) -> None:
        """A load job of ``nbytes`` took ``seconds`` (``finished``: all of it arrived;
        else it was cancelled at its budget)."""
        if nbytes <= 0:
            return
        sample = max(0.0, seconds - (self.first_byte or 0.0)) / nbytes
        if finished:
            self.per_byte = _average(self.per_byte, sample)
        else:
            self.per_byte = max(self.per_byte or 0.0, sample)
        self._measured_at = self.clock()

    def seconds(self, nbytes: int) -> float | None:
        """What a load of ``nbytes`` would take; None when unknown (then it is tried)."""
        if self.per_byte is None or self.clock() - self._measured_at > MEMORY_SECONDS:
            return None
        return (self.first_byte or 0.0) + nbytes * self.per_byte

    def pays(self, nbytes: int, left: float) -> bool:
        """Whether a load of ``nbytes`` is expected to end within ``left`` seconds (with
        the margin); a False starts a background measurement."""
        expected = self.seconds(nbytes)
        if expected is None or expected <= MARGIN * left:
            return True
        self._wanted = max(0.0, MARGIN * left - (self.first_byte or 0.0)) / nbytes
        self._measure()
        return False

    def _measure(self) -> None:
        if self._read is None or self._seen is None:
            return
        now = self.clock()
        if now - self._probed_at < PROBE_SECONDS or not self._probing.acquire(blocking=False):
            return
        self._probed_at = now
        key, size = self._seen
        nbytes = min(size, PROBE_BYTES)
        threading.Thread(
            target=self._probe, args=(key, nbytes), name="s3kv-load-probe", daemon=True
        ).start()

    def _probe(self, key: str, nbytes: int) -> None:
        try:
            started = self.clock()
            self._read(key, nbytes)  # type: ignore[misc]
            per_byte = max(0.0, self.clock() - started - (self.first_byte or 0.0)) / nbytes
        except (S3KVError, OSError):
            return
        finally:
            self._probing.release()
        wanted = self._wanted
        if wanted is not None and per_byte <= wanted:
            self.per_byte, self._measured_at = per_byte, self.clock()  # one stream would do
