"""jobs.submit_on_pool: an async store's start run on the transfer's pool, cancellable
before it sent (no request, the attempt told it was cancelled) and after (through the
request's own cancel)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from s3kv.errors import TransferCancelledError
from s3kv.transfers.jobs import submit_on_pool

pytestmark = pytest.mark.unit


class Outcome:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, BaseException | None]] = []
        self.ended = threading.Event()

    def __call__(self, result: Any, error: BaseException | None) -> None:
        self.calls.append((result, error))
        self.ended.set()


def test_the_start_runs_on_the_pool_and_its_request_is_cancelled_through_it() -> None:
    caller = threading.current_thread()
    ran_on: list[threading.Thread] = []
    cancelled = threading.Event()
    started = threading.Event()

    def start() -> Any:
        ran_on.append(threading.current_thread())
        started.set()
        return cancelled.set  # the request's cancel

    done = Outcome()
    with ThreadPoolExecutor(1) as pool:
        cancel = submit_on_pool(pool, start, done)
        assert started.wait(5)
    assert ran_on and ran_on[0] is not caller
    assert done.calls == []  # the store completes it, not the pool
    cancel()
    assert cancelled.is_set()


def test_cancelled_before_it_ran_it_never_sends_and_the_attempt_hears_so() -> None:
    gate = threading.Event()
    sent = threading.Event()
    done = Outcome()
    with ThreadPoolExecutor(1) as pool:
        pool.submit(gate.wait, 5)  # the pool's one thread is busy
        cancel = submit_on_pool(pool, lambda: sent.set(), done)
        cancel()
        gate.set()
        assert done.ended.wait(5)
    assert not sent.is_set()
    assert len(done.calls) == 1 and isinstance(done.calls[0][1], TransferCancelledError)


def test_cancelled_while_it_was_sending_the_request_is_cancelled_once_sent() -> None:
    sending, go_on = threading.Event(), threading.Event()
    cancelled = threading.Event()

    def start() -> Any:
        sending.set()
        go_on.wait(5)
        return cancelled.set

    with ThreadPoolExecutor(1) as pool:
        cancel = submit_on_pool(pool, start, Outcome())
        assert sending.wait(5)
        cancel()  # before start() returned its cancel
        assert not cancelled.is_set()
        go_on.set()
    assert cancelled.is_set()


def test_a_start_that_raises_fails_the_attempt() -> None:
    def start() -> Any:
        raise OSError("refused")

    done = Outcome()
    with ThreadPoolExecutor(1) as pool:
        submit_on_pool(pool, start, done)
        assert done.ended.wait(5)
    assert len(done.calls) == 1 and isinstance(done.calls[0][1], OSError)
