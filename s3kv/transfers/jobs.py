"""A batch of block transfers: submit, then poll, wait or cancel. Driven by vLLM's scheduler.

One job type for every store. A job keeps a window of attempts in flight: a store that
submits without blocking (awscrt, :meth:`s3kv.stores.Store.can_submit`) starts each as an
async request whose completion arrives on the transport's own threads; any other store's
blocking call runs on the transfer's thread pool (:func:`on_pool`). Either way the
completion starts the next block's attempt in the slot it frees, on its own thread.

Retries are the job's, for every store: the policy of :func:`s3kv.retry.with_retries`
(the same :func:`~s3kv.retry.retry_delay`, so ``Retry-After`` too, the store's pace and
its retry quota), transient errors only, bounded by attempts and by the job's deadline:
``deadline_seconds`` from the job's start, for the blocks it queued too. A block not
started by then fails without a request; one in flight ends within its own timeouts, so
a job ends within its deadline plus one attempt's timeout. A block its store did not send
(paused: the store asked to slow down) waits for the pause without losing an attempt.
Each start runs with :data:`~s3kv.retry.ATTEMPT` set, so its requests report which
attempt they are. :meth:`TransferJob.cancel` cancels the requests in flight that
can be (the store's cancel functions; a pool task not yet running), so a cancelled job
ends soon; a blocking request already running finishes. Ctrl-C (``KeyboardInterrupt``)
met while a block starts cancels the job likewise, and is then raised to the thread that
was starting it: the caller's interrupt, never a block's failure.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from s3kv.errors import (
    S3KVError,
    StorePausedError,
    TransferCancelledError,
    TransientStoreError,
)
from s3kv.report import TransferReport
from s3kv.retry import ATTEMPT, give_up_reason, quota_spent, retry_delay
from s3kv.settings import S3Settings

Outcome = Literal["done", "already_present", "missing", "failed"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BlockResult:
    key: bytes
    outcome: Outcome
    nbytes: int = 0
    reason: str = ""
    verified: bool = True
    data: bytes | None = None


class Done:
    """One attempt's completion: call it once with ``(result, None)`` or ``(None, error)``.

    A second call is ignored, and :meth:`guard` wraps a transport callback so that an
    exception raised inside it (a transport swallows those) completes the attempt as
    failed: no callback can strand a job.
    """

    __slots__ = ("_called", "_fn", "cancel")

    def __init__(self, fn: Callable[[BlockResult | None, BaseException | None], None]) -> None:
        self._fn = fn
        self._called = False
        self.cancel: Callable[[], None] | None = None  # the request's, once started

    def __call__(self, result: BlockResult | None, error: BaseException | None) -> None:
        if self._called:
            return
        self._called = True
        self.cancel = None  # the request is over (and held the caller's buffer)
        self._fn(result, error)

    def guard(self, callback: Callable[..., None]) -> Callable[..., None]:
        def guarded(*args: Any, **kwargs: Any) -> None:
            try:
                callback(*args, **kwargs)
            except BaseException as exc:
                self(None, exc)

        return guarded


class Attempt(Protocol):
    """One block's transfer, startable again after a transient failure."""

    key: bytes

    def start(self, done: Done) -> Callable[[], None] | None:
        """Start one attempt; later ``done(result, None)`` or ``done(None, error)``.
        Returns a function that cancels the request, if the store gives one."""

    def give_up(self, reason: str) -> BlockResult:
        """The failed result once no attempt is left (and any cleanup, e.g. zeroing)."""


_ON_POOL = threading.local()  # .chain: (pool, calls started by a completion on its thread)
logger = logging.getLogger("s3kv")


def on_pool(
    executor: Executor,
    call: Callable[[], T],
    done: Callable[[T | None, BaseException | None], None],
) -> Callable[[], None]:
    """Run a blocking ``call`` on the pool; ``done(result, None)`` or ``done(None, error)``
    later, from the pool's thread, as an async store's completion would. The call reports
    the attempt that started it (:data:`~s3kv.retry.ATTEMPT` does not cross threads by
    itself). Returns the function that cancels it.

    A call started by a completion on a pool thread (the next block, in the slot a block
    just freed) runs next on that same thread, as a worker loop would: a small block
    costs no queue hand-off and no thread wake-up. Such a call has started: it cannot be
    cancelled. A call cancelled before it ran (:meth:`TransferJob.cancel`, or the pool
    shut down with ``cancel_futures``: ``close(wait=False)``), or refused by a pool
    already shut down, completes with :class:`TransferCancelledError`.
    """
    attempt = ATTEMPT.get()
    current: tuple[Executor, list[Any]] | None = getattr(_ON_POOL, "chain", None)
    if current is not None and current[0] is executor:
        current[1].append((call, done, attempt))
        return _started

    def run() -> None:
        chain = [(call, done, attempt)]
        _ON_POOL.chain = (executor, chain)
        try:
            while chain:
                try:
                    _run(*chain.pop())
                except Exception:  # a completion's bug (an on_done that raised)
                    logger.exception("s3kv: a transfer's completion raised")
        finally:
            _ON_POOL.chain = None

    def dropped(future: Future[None]) -> None:
        # On a thread of its own: a pool that shuts down cancels its queue holding its
        # lock, and this completion may submit the next block to that same pool.
        if future.cancelled():
            error = TransferCancelledError("cancelled before it started")
            threading.Thread(target=done, args=(None, error), daemon=True).start()

    try:
        future = executor.submit(run)
    except RuntimeError:  # "cannot schedule new futures after shutdown"
        raise TransferCancelledError("the transfer was closed") from None
    future.add_done_callback(dropped)
    return future.cancel  # type: ignore[return-value]


def submit_on_pool(
    executor: Executor,
    start: Callable[[], Callable[[], None] | None],
    done: Callable[[Any, BaseException | None], None],
) -> Callable[[], None]:
    """Run an async store's ``start()`` (which sends a request whose completion calls
    ``done`` later) on the pool, not on the thread that asks: what it does before the
    request goes out (a block's checksum, the MD5 some stores' answers are checked by)
    then never runs on the transport's event loop, where a completion starts the next
    block, and never stalls that loop's other connections. ``start`` raising calls
    ``done(None, error)``. Returns the function that cancels it: before ``start`` ran it
    never sends (``done`` gets :class:`TransferCancelledError`); after, it cancels the
    request through the function ``start`` returned."""
    lock = threading.Lock()
    sent: list[Callable[[], None] | None] = []
    stopped = [False]

    def call() -> None:
        with lock:
            if stopped[0]:
                raise TransferCancelledError("cancelled before it started")
        request = start()
        with lock:
            sent.append(request)
            late = stopped[0]
        if late and request is not None:
            request()  # cancel() ran while it was being sent

    def failed(_: None, error: BaseException | None) -> None:
        if error is not None:
            done(None, error)

    not_yet = on_pool(executor, call, failed)

    def cancel() -> None:
        with lock:
            stopped[0] = True
            request = sent[0] if sent else None
        not_yet()
        if request is not None:
            request()

    return cancel


def _run(
    call: Callable[[], T], done: Callable[[T | None, BaseException | None], None], attempt: int
) -> None:
    token = ATTEMPT.set(attempt)
    try:
        result = call()
    except BaseException as exc:
        ATTEMPT.reset(token)
        done(None, exc)
        return
    ATTEMPT.reset(token)
    done(result, None)


def _started() -> None:
    """The cancel function of a call that has started: there is nothing to cancel."""


class _NotStarted(TransientStoreError):
    """A block its job's deadline passed before it started (no request was sent)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"not started: the job's deadline passed while it waited for a free slot "
            f"(S3KV_DEADLINE_SECONDS={seconds:g}, counted from the job's start)"
        )


class TransferJob:
    """A batch in flight: up to ``window`` blocks at once, each an :class:`Attempt`.

    ``done()`` never blocks; ``wait()`` blocks (optionally with a timeout) and returns the
    :class:`TransferReport`; ``cancel()`` stops blocks that have not started (they are
    reported failed with reason "cancelled") and cancels the requests in flight that can
    be cancelled. Every block lands in exactly one outcome.
    """

    def __init__(
        self,
        operation: Literal["upload", "download"],
        attempts: Sequence[Attempt],
        *,
        window: int,
        settings: S3Settings,
        on_done: Callable[[TransferJob], None] | None = None,
    ) -> None:
        self.operation = operation
        self._started = time.perf_counter()
        self._deadline = time.monotonic() + settings.deadline_seconds
        self._cancel = threading.Event()
        self._finished = threading.Event()
        self._results: list[BlockResult] = []
        self._report: TransferReport | None = None
        self._on_done = on_done
        self._settings = settings
        self._window = max(1, window)
        self._cond = threading.Condition(threading.Lock())
        self._starting = threading.local()  # set while this thread is inside start()
        self._ready: deque[tuple[Attempt, int, float]] = deque()  # attempt, tries, deadline
        self._later: list[tuple[float, int, Attempt, int, float]] = []  # retry heap
        self._order = itertools.count()
        self._inflight = 0
        self._live: set[Done] = set()  # attempts in flight, to cancel
        self._left = len(attempts)
        self._ready.extend((a, 0, self._deadline) for a in attempts)
        self._timing = False  # a thread waits for the retries in _later
        # Ctrl-C met inside a start(), and the thread it is raised to (that start's)
        self._interrupt: tuple[BaseException, int] | None = None
        if not attempts:
            self._finish()
            return
        # Started from a completion on a pool thread (an on_done that submits the next
        # batch), the first window still goes to the pool, not after that one call.
        chain, _ON_POOL.chain = getattr(_ON_POOL, "chain", None), None
        try:
            self._pump()
        finally:
            _ON_POOL.chain = chain

    def cancel(self) -> None:
        """Stop blocks not yet started; cancel the requests in flight that can be."""
        self._cancel.set()
        with self._cond:
            self._cond.notify()  # the retries' timer has nothing left to wait for
            live = list(self._live)
        self._pump()  # blocks not started (and retries waiting) are given up, "cancelled"
        for done in live:  # each ends with an error, then gives up as "cancelled"
            if done.cancel is not None:
                done.cancel()

    def _pump(self) -> None:
        """Start ready blocks while the window has room, on this thread (the caller's at
        first, then the retries' timer's). A start that completes at once hands its slot
        back here: a run of such failures loops, it does not recurse. Once cancelled,
        gives up every block not started."""
        while True:
            with self._cond:
                if self._cancel.is_set() and (self._ready or self._later):
                    dropped = [a for a, _, _ in self._ready]
                    dropped += [entry[2] for entry in self._later]
                    self._ready.clear()
                    self._later.clear()
                elif self._ready and self._inflight < self._window:
                    attempt, tries, deadline = self._ready.popleft()
                    self._inflight += 1
                    dropped = []
                else:
                    interrupt = self._interrupt
                    if interrupt is not None and interrupt[1] == threading.get_ident():
                        self._interrupt = None
                        raise interrupt[0]  # every block settled: now the caller hears it
                    return
            if dropped:
                for attempt in dropped:
                    self._settle(attempt.give_up("cancelled"))
            else:
                self._launch(attempt, tries, deadline)

    def _time_retries(self) -> None:
        """The retries' timer: a thread that lives while retries wait (none, mostly)."""
        while True:
            with self._cond:
                while True:
                    if not self._later or self._cancel.is_set():
                        self._timing = False
                        break
                    now = time.monotonic()
                    if self._later[0][0] <= now:
                        _, _, attempt, tries, deadline = heapq.heappop(self._later)
                        self._ready.appendleft((attempt, tries, deadline))
                        break
                    self._cond.wait(self._later[0][0] - now)
                timing = self._timing
            self._pump()
            if not timing:
                return

    def _launch(self, attempt: Attempt, tries: int, deadline: float) -> bool:
        """Start one attempt; True if it completed inside start() (or never started:
        the job's deadline passed while it waited)."""
        started: list[Done] = []  # not `done` itself: a cycle would keep the buffers alive

        def completed(result: BlockResult | None, error: BaseException | None) -> None:
            self._live.discard(started.pop())
            self._completed(attempt, tries + 1, deadline, result, error)

        done = Done(completed)
        started.append(done)
        self._live.add(done)
        if tries == 0 and time.monotonic() > deadline:
            self._starting.active = True
            done(None, _NotStarted(self._settings.deadline_seconds))
            self._starting.active = False
            return True
        self._starting.active = True
        token = ATTEMPT.set(tries + 1)  # the attempt its requests report
        try:
            done.cancel = attempt.start(done)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # Ctrl-C (or SystemExit) inside start(): the caller's interrupt, not this
                # block's failure. The job stops (this block and those not started are
                # given up, "cancelled"), then _pump raises it to the thread that started
                # the job.
                self._interrupt = (exc, threading.get_ident())
                self._cancel.set()
            done(None, exc)
        finally:
            ATTEMPT.reset(token)
            self._starting.active = False
        if self._cancel.is_set() and done.cancel is not None:
            done.cancel()  # cancel() ran while this one was starting
        return not started

    def _completed(
        self,
        attempt: Attempt,
        tries: int,
        deadline: float,
        result: BlockResult | None,
        error: BaseException | None,
    ) -> None:
        if result is None:
            try:
                result = self._retry_or_fail(attempt, tries, deadline, error)
            except Exception as exc:  # a give-up that fails must not lose the block
                result = BlockResult(
                    attempt.key, "failed", reason=f"unexpected {type(exc).__name__}: {exc}"
                )
        # The freed slot goes straight to the next ready block, from this thread (the
        # transport's, or the pool's). A completion reported from inside start() (a
        # synchronous failure) leaves the slot to the _pump() that called start(), so a
        # run of such failures cannot recurse.
        inline = not getattr(self._starting, "active", False)
        last = False
        if result is not None:
            self._results.append(result)  # list.append is atomic
        with self._cond:  # one lock per completion: the block settled, its slot passed on
            if result is not None:
                self._left -= 1
                last = self._left == 0
            if inline and self._ready and not self._cancel.is_set():
                successor: tuple[Attempt, int, float] | None = self._ready.popleft()
            else:
                successor = None
                self._inflight -= 1
        if last:
            self._finish()
        if successor is not None and self._launch(*successor):
            self._pump()  # it completed inside start(): its slot is free again

    def _retry_or_fail(
        self, attempt: Attempt, tries: int, deadline: float, error: BaseException | None
    ) -> BlockResult | None:
        s = self._settings
        interrupted = error is not None and not isinstance(error, Exception)  # Ctrl-C
        if isinstance(error, TransferCancelledError) or interrupted or (
            self._cancel.is_set() and isinstance(error, TransientStoreError)
        ):
            return attempt.give_up("cancelled")
        if isinstance(error, _NotStarted):
            return attempt.give_up(str(error))
        if isinstance(error, StorePausedError):
            tries -= 1  # nothing was sent: the pause costs no attempt
        if isinstance(error, TransientStoreError):
            now = time.monotonic()
            if isinstance(error, StorePausedError):
                delay = error.retry_after or 0.0
            else:
                delay = retry_delay(s, tries, error)
                if (error.pacer is not None and tries < s.max_attempts
                        and now + delay <= deadline and not error.pacer.may_retry(error)):
                    return attempt.give_up(quota_spent(error))
            if tries < s.max_attempts and now + delay <= deadline:
                with self._cond:
                    heapq.heappush(
                        self._later, (now + delay, next(self._order), attempt, tries, deadline)
                    )
                    self._cond.notify()  # the timer sleeps until the earliest retry
                    timing, self._timing = self._timing, True
                if not timing:
                    name = f"s3kv-{self.operation}-retries"
                    threading.Thread(target=self._time_retries, name=name, daemon=True).start()
                return None
            started = deadline - s.deadline_seconds
            return attempt.give_up(give_up_reason(error, s, max(tries, 1), now - started, delay))
        if isinstance(error, S3KVError):
            return attempt.give_up(str(error))
        return attempt.give_up(f"unexpected {type(error).__name__}: {error}")

    def _settle(self, result: BlockResult) -> None:
        self._results.append(result)
        with self._cond:
            self._left -= 1
            last = self._left == 0
        if last:
            self._finish()

    def _finish(self) -> None:
        buckets: dict[str, list[bytes]] = {"done": [], "already_present": [], "missing": []}
        failed: dict[bytes, str] = {}
        data: dict[bytes, bytes] = {}
        nbytes = 0
        unverified: list[bytes] = []
        for r in self._results:
            if r.outcome == "failed":
                failed[r.key] = r.reason
                continue
            buckets[r.outcome].append(r.key)
            nbytes += r.nbytes
            if r.outcome == "done" and not r.verified:
                unverified.append(r.key)
            if r.data is not None:
                data[r.key] = r.data
        self._report = TransferReport(
            operation=self.operation,
            done=tuple(buckets["done"]),
            already_present=tuple(buckets["already_present"]),
            missing=tuple(buckets["missing"]),
            failed=failed,
            bytes=nbytes,
            seconds=time.perf_counter() - self._started,
            unverified=len(unverified),
            unverified_keys=tuple(unverified),
            data=data,
        )
        self._finished.set()
        if self._on_done is not None:
            self._on_done(self)

    def done(self) -> bool:
        """True once every block has finished (never blocks)."""
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> TransferReport:
        """Block until finished; :class:`TimeoutError` if ``timeout`` seconds pass first."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"{self.operation} still running after {timeout}s")
        assert self._report is not None
        return self._report

    def result(self) -> TransferReport:
        return self.wait()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()
