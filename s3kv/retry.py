"""The one retry policy: backoff with full jitter, the store's ``Retry-After``, attempts and
a deadline. Every request goes through it: blocks (in :class:`s3kv.transfers.jobs.TransferJob`,
with the same :func:`retry_delay`), and here manifests, HEADs, listing pages and deletes.

How long one attempt may take is the store's part: each request is bounded by the
connect and read timeouts (a read timeout counts from the last byte that moved), so a
stalled attempt ends as a :class:`~s3kv.errors.TransientStoreError` and comes back here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import TypeVar

from s3kv.errors import TransientStoreError
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
        f"; the store asked to retry after {asked:g}s, past the deadline"
        if asked is not None and asked >= delay and attempt < settings.max_attempts
        else ""
    )
    return (
        f"{error} (gave up after {attempt} attempts in {elapsed:.1f}s{waited}; limits: "
        f"S3KV_MAX_ATTEMPTS={settings.max_attempts}, "
        f"S3KV_DEADLINE_SECONDS={settings.deadline_seconds:g})"
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
    re-raising the last error with the count of attempts. Each call runs with
    :data:`ATTEMPT` set to its number.
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
        delay = retry_delay(settings, attempt, error)
        now = time.monotonic()
        if attempt >= settings.max_attempts or now + delay > deadline:
            raise TransientStoreError(
                give_up_reason(error, settings, attempt, now - started, delay)
            ) from error
        time.sleep(delay)
