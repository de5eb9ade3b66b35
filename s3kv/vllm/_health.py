"""The store's health as the tier sees it: when to stop asking it, and when to ask again.

* **The breaker.** ``breaker_failures`` (:data:`BREAKER_FAILURES`) failures in a row,
  the first of them at least :data:`BREAKER_SECONDS` before the last, open it: a request
  that failed transiently (a timeout, a refused or reset connection, a 5xx, throttling)
  or a request whose wait budget ran out (:mod:`s3kv.vllm._budget`). Any other answer of
  the store (found, not found, created, denied) resets the count, so a burst of
  throttled requests that their retries get past opens nothing. While it is open,
  lookups answer MISS at once (those in flight too), loads fail at once (vLLM
  recomputes), stores are declined before vLLM pins a row for them, and running jobs are
  cancelled. One probe
  in the background decides when to close it: every :data:`PROBE_SECONDS` (1 s, growing
  to 5 s while the outage lasts), a look at a key that holds no object (any answer, found
  or not, is the store answering), up to :data:`MAX_PROBES` in flight, so one stuck on a
  stalled connection does not delay the next. The first answer that comes within the
  wait budget closes it. A request that started before the breaker last closed says
  nothing of the store now: its failure is not counted.
* **Writes the store refuses for good** (denied: a key that may only read; full: 507 or
  a quota) pause stores for :data:`WRITE_PAUSE_SECONDS`; then one store job of one block
  tries again (the next after another pause if it is refused too), and the first block
  stored ends the pause.

Every change is reported to ``on_change`` (the tier logs one line and counts it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

from s3kv.errors import InvalidInputError, S3KVError, TransientStoreError
from s3kv.stores.base import RequestEvent
from s3kv.vllm._logs import CHANGE_SECONDS, QuietLog
from s3kv.vllm._metrics import BREAKER_OPEN, STORES_PAUSED, TierMeter

BREAKER_FAILURES = 3
"""Failures in a row that open the breaker, by default (the tier's ``breaker_failures``)."""

BREAKER_SECONDS = 1.0
"""How long failures must go on, with no answer between them, to open the breaker."""

PROBE_SECONDS = (1.0, 5.0)
"""The first wait between probes of an open breaker, and the longest (x1.5 each time)."""

MAX_PROBES = 4
"""Probes in flight at once: a probe stuck on a stalled connection lasts the store's
connect and read timeouts; the next ones go on."""

WRITE_PAUSE_SECONDS = 60.0
"""How long stores pause after a write the store refused for good, before one block
tries again."""

ANSWERED = frozenset({"ok", "created", "exists", "not_found", "denied", "size_mismatch"})
"""Request outcomes that are the store answering (``transient`` is a failure; ``error``,
an answer nothing here can judge, is neither)."""

Verdict = Literal["go", "trial", "breaker", "refused"]
Change = Literal["opened", "closed", "paused", "resumed"]


class StoreHealth:
    """The breaker and the write pause of one tier (thread-safe).

    ``probe()`` looks at the store once (a single request, no retry): it returns or
    raises an :class:`~s3kv.errors.S3KVError` when the store answered, raises
    :class:`~s3kv.errors.TransientStoreError` when it did not. ``fast_enough`` is the
    longest a probe may take to count (the wait budget).
    """

    def __init__(
        self,
        probe: Callable[[], object],
        *,
        failures_to_open: int = BREAKER_FAILURES,
        fast_enough: float = float("inf"),
        on_change: Callable[[Change, str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures_to_open = failures_to_open
        self.fast_enough = fast_enough
        self.clock = clock
        self.opened = self.closed = 0
        """Times the breaker opened and closed (running totals, for the tier's metrics)."""
        self._probe = probe
        self._on_change = on_change
        self._lock = threading.Lock()
        self._failures = 0
        self._failing_since = 0.0
        self._opened_at: float | None = None
        self._closed_at = float("-inf")
        self._paused_until = 0.0
        self._probes = threading.BoundedSemaphore(MAX_PROBES)
        self._stop = threading.Event()

    # -- the breaker ----------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._opened_at is not None

    def on_request(self, event: RequestEvent) -> None:
        """A request of the tier's store ended (its hook)."""
        if event.outcome == "transient":
            # an I/O process's requests arrive with their job: when they were sent counts
            self.failure(event.operation, started=(event.ended or self.clock()) - event.seconds)
        elif event.outcome in ANSWERED:
            with self._lock:
                self._failures = 0

    def failure(self, why: str, *, started: float | None = None) -> None:
        """A request failed, or ran out of its budget; ``started``: when it was sent."""
        with self._lock:
            if self._opened_at is not None or (started is not None and started < self._closed_at):
                return
            now = self.clock()
            self._failures += 1
            if self._failures == 1:
                self._failing_since = now
            going_on = now - self._failing_since
            if self._failures < self.failures_to_open or going_on < BREAKER_SECONDS:
                return
            self._opened_at = now
            self.opened += 1
        self._tell("opened", f"{self._failures} failures in a row, the last: {why}")
        threading.Thread(target=self._probing, name="s3kv-breaker-probe", daemon=True).start()

    def _close(self) -> None:
        with self._lock:
            if self._opened_at is None:
                return
            seconds = self.clock() - self._opened_at
            self._opened_at = None
            self._closed_at = self.clock()
            self._failures = 0
            self.closed += 1
        self._tell("closed", f"after {seconds:.1f} s")

    def _probing(self) -> None:
        wait, longest = PROBE_SECONDS
        while self.is_open and not self._stop.is_set():
            if self._probes.acquire(blocking=False):
                threading.Thread(target=self._probe_once, name="s3kv-probe", daemon=True).start()
            if self._stop.wait(wait):
                return
            wait = min(longest, wait * 1.5)

    def _probe_once(self) -> None:
        started = self.clock()
        try:
            self._probe()
            answered = True
        except TransientStoreError:
            answered = False
        except S3KVError:
            answered = True  # denied, not found, another region...: the store answered
        except Exception:
            answered = False
        finally:
            self._probes.release()
        if answered and self.clock() - started <= self.fast_enough:
            self._close()

    # -- writes ---------------------------------------------------------------------------

    def writes_refused(self, why: str) -> None:
        """A write was refused for good (denied, or the store is full): pause stores."""
        with self._lock:
            first = self._paused_until == 0.0
            self._paused_until = self.clock() + WRITE_PAUSE_SECONDS
        if first:
            self._tell("paused", why)

    def writes_work(self) -> None:
        """A block was stored: a pause, if any, is over."""
        with self._lock:
            paused, self._paused_until = self._paused_until != 0.0, 0.0
        if paused:
            self._tell("resumed", "a block was stored again")

    def declines_stores(self) -> bool:
        """Whether a store would be declined now (a look: the trial is not taken)."""
        return self.is_open or self.clock() < self._paused_until

    def may_store(self) -> Verdict:
        """What a store job may do now: ``go``; ``trial`` (one block, the first after a
        pause; the next trial comes after another pause); or why it is declined."""
        if self.is_open:
            return "breaker"
        with self._lock:
            if self._paused_until == 0.0:
                return "go"
            now = self.clock()
            if now < self._paused_until:
                return "refused"
            self._paused_until = now + WRITE_PAUSE_SECONDS
            return "trial"

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop probing (a probe in flight ends with the store's timeouts)."""
        self._stop.set()

    def _tell(self, change: Change, why: str) -> None:
        if self._on_change is not None:
            self._on_change(change, why)


def parse_failures(value: object) -> int:
    """The tier entry's ``breaker_failures``: a whole number of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(
            f"breaker_failures {value!r} is not a whole number of at least 1; give e.g. "
            f"{BREAKER_FAILURES} (failures in a row before the tier stops asking the store)"
        )
    return value


def announce(change: Change, why: str, *, tier_type: str, meter: TierMeter,
             quiet: QuietLog) -> None:
    """A change said once: a gauge, and one log line (rate-limited should it flap)."""
    if change == "opened":
        meter.gauge(BREAKER_OPEN, 1)
        quiet.warning(
            "breaker-opened",
            "s3kv tier %r: the store fails (%s): lookups answer miss and loads and stores "
            "are skipped until a probe finds it answering",
            tier_type, why, every=CHANGE_SECONDS,
        )  # fmt: skip
    elif change == "closed":
        meter.gauge(BREAKER_OPEN, 0)
        # a warning too: its pair (vLLM's process shows s3kv's warnings, not its info)
        quiet.warning("breaker-closed", "s3kv tier %r: the store answers again (%s)",
                      tier_type, why, every=CHANGE_SECONDS)  # fmt: skip
    elif change == "paused":
        meter.gauge(STORES_PAUSED, 1)
        quiet.warning(
            "stores-paused",
            "s3kv tier %r: the store refused a write for good (%s): stores pause, and one "
            "block tries again every %.0f s (set read_only if this key may only read)",
            tier_type, why, WRITE_PAUSE_SECONDS, every=CHANGE_SECONDS,
        )  # fmt: skip
    else:
        meter.gauge(STORES_PAUSED, 0)
        quiet.warning("stores-resumed", "s3kv tier %r: stores resume (%s)", tier_type, why,
                      every=CHANGE_SECONDS)
