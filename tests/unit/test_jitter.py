"""s3kv's jitter leaves the global ``random`` state alone.

Retries and renewal run on background threads; if they drew from the global generator,
an application that seeds ``random`` (or Hypothesis, which replays examples from it) would
see its sequence move under it. CI once failed on exactly that replay check.
"""

from __future__ import annotations

import random

import pytest

from s3kv.ops.gc.renewal_queue import RenewalQueue
from s3kv.retry import backoff_delay, retry_delay
from s3kv.settings import S3Settings

pytestmark = pytest.mark.unit


def test_backoff_draws_from_its_own_generator() -> None:
    settings = S3Settings()
    before = random.getstate()
    delays = [backoff_delay(settings, attempt) for attempt in range(1, 50)]
    delays.append(retry_delay(settings, 3, None))
    assert random.getstate() == before
    assert len(set(delays)) > 1, "the jitter should still vary"


def test_renewal_spread_and_pause_draw_from_their_own_generator() -> None:
    queue = RenewalQueue(
        lambda task: False, concurrency=1, chain_budget=1, spread=3600.0, max_pending=100
    )
    try:
        before = random.getstate()
        assert queue.push([(f"k{i}", None) for i in range(20)]) == 20
        assert queue.pause() > 0
        assert random.getstate() == before
    finally:
        queue.close(timeout=1.0)
