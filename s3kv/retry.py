"""The one retry policy: backoff with full jitter, the store's ``Retry-After``, attempts, a
deadline, and one pace per store. Every request goes through it: blocks (in
:class:`s3kv.transfers.jobs.TransferJob`, with the same :func:`retry_delay`), and here
manifests, looks, listing pages and deletes.

How long one attempt may take is the store's part: each request is bounded by the
connect and read timeouts (a read timeout counts from the last byte that moved), so a
stalled attempt ends as a :class:`~s3kv.errors.TransientStoreError` and comes back here.

**A store that asks to slow down is asked less, by everyone** (:class:`Pacer`, one per
store, as the AWS SDKs' retry modes and rclone's pacer do). An answer that throttles
(503 SlowDown, 500, 429, or any with ``Retry-After``) pauses every request to that store
until the ``Retry-After`` it asked for, or a backoff that doubles with each throttling
episode (from :data:`PAUSE_BASE_SECONDS`, with jitter, up to ``backoff_max_seconds``):
the store sends nothing meanwhile (:class:`~s3kv.errors.StorePausedError`, which costs no
attempt), so a storm meets one request per block per pause, not a retry per block per
backoff. Retries of other failures draw on a quota (:data:`RETRY_QUOTA`, 5 a retry, one
back per success), so a store that fails everything stops being retried at once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from s3kv.errors import StorePausedError, TransientStoreError
from s3kv.settings import S3Settings

T = TypeVar("T")

# Jitter from a generator of our own: a library's background threads must not move the
# global ``random`` state that an application (or its test framework) seeds and replays.
JITTER = random.Random()

ATTEMPT: ContextVar[int] = ContextVar("s3kv_attempt", default=1)
"""The attempt (1-based) that requests sent now belong to: :func:`with_retries` sets it
around each call, :class:`s3kv.transfers.jobs.TransferJob` around each start. A store
reports it with each request (:class:`s3kv.stores.hooks.RequestEvent`): a retry is known."""


def backoff_delay(settings: S3Settings, attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): full jitter, capped."""
    cap = min(settings.backoff_max_seconds, settings.backoff_base_seconds * 2**attempt)
    return JITTER.uniform(0, cap)


def retry_delay(settings: S3Settings, attempt: int, error: BaseException | None) -> float:
    """The wait before retry number ``attempt``: the backoff, or longer if the store asked
    for longer (``Retry-After``, as rclone's pacer honours it)."""
    delay = backoff_delay(settings, attempt)
    asked = getattr(error, "retry_after", None)
    return max(delay, asked) if asked is not None else delay


def give_up_reason(
    error: BaseException, settings: S3Settings, attempt: int, elapsed: float, delay: float
) -> str:
    """Why retrying stops, with the limits to change."""
    asked = getattr(error, "retry_after", None)
    waited = (
        f"; the store asked to retry after {round(asked, 1):g}s, past the deadline"
        if asked is not None and asked >= delay and attempt < settings.max_attempts
        else ""
    )
    return (
        f"{error} (gave up after {attempt} attempts in {elapsed:.1f}s{waited}; limits: "
        f"S3KV_MAX_ATTEMPTS={settings.max_attempts}, "
        f"S3KV_DEADLINE_SECONDS={settings.deadline_seconds:g})"
    )


PAUSE_BASE_SECONDS = 0.5
"""The first pause of a throttling episode without ``Retry-After``; each next one doubles."""

RETRY_QUOTA = 500
"""Retries a store may owe at most (botocore's standard retry mode: 500 tokens, 5 a retry,
one back per success): past it, failures are not retried until requests succeed again."""
RETRY_COST = 5


class Pacer:
    """One store's pace: the pause every request to it keeps after it throttled, and its
    retry quota. Thread-safe; its methods are quick and never block."""

    def __init__(self, settings: S3Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._until = 0.0  # time.monotonic() the pause ends at
        self._level = 0  # throttling episodes in a row, without a success between
        self._tokens = RETRY_QUOTA
        self.pauses = 0
        """Throttling episodes so far (a metric)."""

    def left(self) -> float:
        """Seconds the store's pause has left (0: requests may go)."""
        return max(0.0, self._until - time.monotonic())

    def check(self, operation: str, where: str) -> None:
        """Raise :class:`StorePausedError` while the store is paused: nothing is sent
        (but on a thread inside :func:`unpaced`)."""
        if getattr(_UNPACED, "active", False):
            return
        left = self.left()
        if left > 0:
            error = StorePausedError(
                f"{operation} {where}: not sent: the store asked to slow down; every request "
                f"to it waits {left:.1f}s more",
                retry_after=left,
            )
            error.pacer = self
            raise error

    def throttled(self, retry_after: float | None) -> float:
        """The store throttled a request: pause every request to it (see the module).
        Returns the pause's end (a ``time.monotonic()`` value)."""
        s = self._settings
        with self._lock:
            now = time.monotonic()
            if now >= self._until:  # a new episode: answers of requests sent before the
                self._level += 1  # pause belong to the episode that started it
                self.pauses += 1
                base = min(s.backoff_max_seconds, PAUSE_BASE_SECONDS * 2 ** (self._level - 1))
                self._until = now + JITTER.uniform(0.5, 1.0) * base
            if retry_after is not None:
                self._until = max(self._until, now + retry_after)
            return self._until

    def succeeded(self) -> None:
        """A request succeeded: the episodes start over, and the quota gets a token back."""
        if self._level or self._tokens < RETRY_QUOTA:
            with self._lock:
                self._level = 0
                self._tokens = min(RETRY_QUOTA, self._tokens + 1)

    def may_retry(self, error: TransientStoreError) -> bool:
        """Take a retry from the quota; False when it is spent. A throttled request or one
        not sent costs none: the pause paces those."""
        if error.throttled or isinstance(error, StorePausedError):
            return True
        with self._lock:
            if self._tokens < RETRY_COST:
                return False
            self._tokens -= RETRY_COST
            return True


_UNPACED = threading.local()


@contextmanager
def unpaced() -> Iterator[None]:
    """Requests this thread sends meanwhile are not held by their store's pause: cleanup
    (an abort that frees a failed upload's billable parts) and the question that asks a
    paused store how long to wait."""
    _UNPACED.active = True
    try:
        yield
    finally:
        _UNPACED.active = False


def quota_spent(error: TransientStoreError) -> str:
    return (
        f"{error} (not retried: the store's retry quota is spent, {RETRY_QUOTA // RETRY_COST} "
        "retries of failed requests in a row; requests are retried again once some succeed)"
    )


def with_retries(
    fn: Callable[[], T],
    settings: S3Settings,
    *,
    deadline: float | None = None,
) -> T:
    """Call ``fn`` until it succeeds, retrying :class:`TransientStoreError` only.

    Gives up after ``settings.max_attempts`` attempts or once the next attempt would start
    after ``deadline`` (a ``time.monotonic()`` value; default: now + deadline_seconds),
    re-raising the last error with the count of attempts; or when the store's retry quota
    is spent (:class:`Pacer`). A request its store did not send (paused) is waited for
    and costs no attempt. Each call runs with :data:`ATTEMPT` set to its number.
    """
    started = time.monotonic()
    if deadline is None:
        deadline = started + settings.deadline_seconds
    attempt = 0
    while True:
        attempt += 1
        token = ATTEMPT.set(attempt)
        try:
            return fn()
        except TransientStoreError as exc:
            error = exc
        finally:
            ATTEMPT.reset(token)
        now = time.monotonic()
        if isinstance(error, StorePausedError):
            attempt -= 1  # nothing was sent
            delay = error.retry_after or 0.0
            if now + delay > deadline:
                raise TransientStoreError(
                    give_up_reason(error, settings, attempt, now - started, delay)
                ) from error
            time.sleep(delay)
            continue
        delay = retry_delay(settings, attempt, error)
        if attempt >= settings.max_attempts or now + delay > deadline:
            raise TransientStoreError(
                give_up_reason(error, settings, attempt, now - started, delay)
            ) from error
        if error.pacer is not None and not error.pacer.may_retry(error):
            raise TransientStoreError(quota_spent(error)) from error
        time.sleep(delay)
