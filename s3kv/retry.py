"""Retries with exponential backoff and full jitter, bounded by attempts and a deadline."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from s3kv.errors import TransferCancelledError, TransientStoreError
from s3kv.settings import S3Settings

T = TypeVar("T")


def backoff_delay(settings: S3Settings, attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): full jitter, capped."""
    cap = min(settings.backoff_max_seconds, settings.backoff_base_seconds * 2**attempt)
    return random.uniform(0, cap)


def with_retries(
    fn: Callable[[], T],
    settings: S3Settings,
    *,
    cancelled: threading.Event | None = None,
    deadline: float | None = None,
) -> T:
    """Call ``fn`` until it succeeds, retrying :class:`TransientStoreError` only.

    Gives up after ``settings.max_attempts`` attempts or once the next attempt would start
    after ``deadline`` (a ``time.monotonic()`` value; default: now + deadline_seconds),
    re-raising the last error with the count of attempts.
    """
    started = time.monotonic()
    if deadline is None:
        deadline = started + settings.deadline_seconds
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except TransientStoreError as exc:
            delay = backoff_delay(settings, attempt)
            if attempt >= settings.max_attempts or time.monotonic() + delay > deadline:
                raise TransientStoreError(
                    f"{exc} (gave up after {attempt} attempts in "
                    f"{time.monotonic() - started:.1f}s; limits: S3KV_MAX_ATTEMPTS="
                    f"{settings.max_attempts}, S3KV_DEADLINE_SECONDS={settings.deadline_seconds:g})"
                ) from exc
            if cancelled is not None:
                if cancelled.wait(delay):
                    raise TransferCancelledError("cancelled while waiting to retry") from exc
            else:
                time.sleep(delay)
