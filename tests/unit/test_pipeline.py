"""TransferJob: the window, retries, give-up and cancel, with attempts that finish later
on other threads (as awscrt's completions do)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from s3kv import S3Settings, TransientStoreError
from s3kv.errors import ObjectNotFoundError
from s3kv.retry import ATTEMPT
from s3kv.transfers.jobs import BlockResult, Done, TransferJob, on_pool

pytestmark = pytest.mark.unit

SETTINGS = S3Settings.resolve({}, max_attempts=4, backoff_base_seconds=0.001)


class Fake:
    """Fails transiently ``failures`` times, then stores; counts concurrency."""

    live = 0
    peak = 0
    lock = threading.Lock()

    def __init__(self, key: bytes, failures: int = 0, error: BaseException | None = None):
        self.key, self.failures, self.error = key, failures, error
        self.starts = 0
        self.gave_up: str | None = None

    def start(self, done: Done) -> None:
        self.starts += 1
        with Fake.lock:
            Fake.live += 1
            Fake.peak = max(Fake.peak, Fake.live)

        def finish() -> None:
            with Fake.lock:
                Fake.live -= 1
            if self.error is not None:
                done(None, self.error)
            elif self.starts <= self.failures:
                done(None, TransientStoreError("503 SlowDown"))
            else:
                done(BlockResult(self.key, "done", nbytes=1), None)

        threading.Timer(0.002, finish).start()

    def give_up(self, reason: str) -> BlockResult:
        self.gave_up = reason
        return BlockResult(self.key, "failed", reason=reason)


def test_window_bounds_requests_in_flight_and_all_finish() -> None:
    Fake.peak = 0
    attempts = [Fake(bytes([i]) * 8) for i in range(60)]
    report = TransferJob("upload", attempts, window=5, settings=SETTINGS).wait(30)
    assert report.ok and len(report.done) == 60
    assert 1 < Fake.peak <= 5


def test_transient_failures_are_retried_then_given_up() -> None:
    flaky, hopeless = Fake(b"a" * 8, failures=2), Fake(b"b" * 8, failures=99)
    report = TransferJob("upload", [flaky, hopeless], window=4, settings=SETTINGS).wait(30)
    assert report.done == (flaky.key,) and flaky.starts == 3
    assert hopeless.starts == SETTINGS.max_attempts
    assert "gave up after 4 attempts" in report.failed[hopeless.key] == hopeless.gave_up


def test_other_errors_fail_at_once() -> None:
    gone = Fake(b"c" * 8, error=ObjectNotFoundError("no such object"))
    report = TransferJob("download", [gone], window=1, settings=SETTINGS).wait(30)
    assert gone.starts == 1 and report.failed[gone.key] == "no such object"


def test_cancel_fails_what_has_not_started() -> None:
    attempts = [Fake(bytes([i]) * 8) for i in range(200)]
    job = TransferJob("upload", attempts, window=2, settings=SETTINGS)
    job.cancel()
    report = job.wait(30)
    assert report.count == 200
    assert set(report.failed.values()) == {"cancelled"} and len(report.done) < 200
    assert all(a.starts == 0 for a in attempts if a.key in report.failed)


def test_empty_batch_is_done_at_once() -> None:
    job = TransferJob("upload", [], window=3, settings=SETTINGS)
    assert job.done() and job.wait(0).ok


class Immediate:
    """Reports its outcome from inside start(), as a store does when a request fails
    before it is sent; with ``raise_`` it raises instead."""

    def __init__(self, key: bytes, raise_: bool = False) -> None:
        self.key, self.raise_ = key, raise_

    def start(self, done: Done) -> None:
        if self.raise_:
            raise ObjectNotFoundError("refused before sending")
        done(None, ObjectNotFoundError("refused before sending"))

    def give_up(self, reason: str) -> BlockResult:
        return BlockResult(self.key, "failed", reason=reason)


@pytest.mark.parametrize("raise_", [False, True])
def test_failures_inside_start_do_not_recurse(raise_: bool) -> None:
    """Thousands of blocks that fail synchronously: every one is reported, no block is
    lost and no RecursionError (a completion inside start() hands its slot back to the
    driver instead of starting the next block on the same stack)."""
    attempts = [Immediate(i.to_bytes(4, "big"), raise_) for i in range(5000)]
    report = TransferJob("download", attempts, window=4, settings=SETTINGS).wait(60)
    assert len(report.failed) == 5000 and not report.done
    assert all("refused before sending" in reason for reason in report.failed.values())


def test_completions_start_the_next_block_without_the_driver() -> None:
    """Completions arriving on other threads keep the window full by themselves: the
    caller's thread starts only the first window's worth of blocks, and no other thread
    is started for the job."""
    started_on: list[str] = []

    class Recorder(Fake):
        def start(self, done: Done) -> None:
            started_on.append(threading.current_thread().name)
            super().start(done)

    attempts = [Recorder(bytes([i]) * 8) for i in range(40)]
    report = TransferJob("upload", attempts, window=4, settings=SETTINGS).wait(30)
    assert report.ok and len(report.done) == 40
    assert started_on.count(threading.current_thread().name) == 4
    assert not any(name.startswith("s3kv-") for name in started_on)


class Queued:
    """Takes ``seconds``, and fails transiently at its first attempt if ``flaky``."""

    def __init__(self, key: bytes, seconds: float, flaky: bool = False) -> None:
        self.key, self.seconds, self.flaky, self.starts = key, seconds, flaky, 0

    def start(self, done: Done) -> None:
        self.starts += 1
        error = TransientStoreError("503 SlowDown") if self.flaky and self.starts == 1 else None
        result = None if error else BlockResult(self.key, "done", nbytes=1)
        threading.Timer(self.seconds, done, (result, error)).start()

    def give_up(self, reason: str) -> BlockResult:
        return BlockResult(self.key, "failed", reason=reason)


def test_a_jobs_deadline_counts_from_its_start_for_the_blocks_it_queued() -> None:
    """The deadline is the job's (issue 38, point 4): blocks queued behind others past it
    fail without a request, each saying so; those that started by then finish."""
    settings = S3Settings.resolve(
        {}, max_attempts=3, backoff_base_seconds=0.001, deadline_seconds=0.5
    )
    ahead = [Queued(bytes([i]) * 8, 0.15) for i in range(6)]  # 0.9 s in a window of 1
    last = Queued(b"L" * 8, 0.01, flaky=True)
    report = TransferJob("upload", [*ahead, last], window=1, settings=settings).wait(30)
    assert last.starts == 0  # never sent
    assert last.key in report.failed and report.failed[last.key].startswith("not started")
    assert "S3KV_DEADLINE_SECONDS=0.5" in report.failed[last.key]
    assert 1 <= len(report.done) <= 5  # those that started within the deadline


class Blocking:
    """A blocking store's call, on the pool: fails transiently ``failures`` times; records
    the attempt each call reports (:data:`s3kv.retry.ATTEMPT`)."""

    def __init__(
        self,
        pool: ThreadPoolExecutor,
        key: bytes,
        failures: int = 0,
        gate: threading.Event | None = None,
    ) -> None:
        self.pool, self.key, self.failures, self.gate = pool, key, failures, gate
        self.attempts: list[int] = []

    def call(self) -> BlockResult:
        self.attempts.append(ATTEMPT.get())
        if self.gate is not None:
            assert self.gate.wait(10), "the test never opened the gate"
        if len(self.attempts) <= self.failures:
            raise TransientStoreError("503 SlowDown")
        return BlockResult(self.key, "done", nbytes=1)

    def start(self, done: Done) -> object:
        return on_pool(self.pool, self.call, done)

    def give_up(self, reason: str) -> BlockResult:
        return BlockResult(self.key, "failed", reason=reason)


def test_blocking_calls_retry_in_the_job_and_report_their_attempt() -> None:
    with ThreadPoolExecutor(4) as pool:
        attempts = [Blocking(pool, bytes([i]) * 8, failures=i % 3) for i in range(30)]
        report = TransferJob("upload", attempts, window=4, settings=SETTINGS).wait(30)
    assert report.ok and len(report.done) == 30
    assert all(a.attempts == list(range(1, a.failures + 2)) for a in attempts)


def test_a_pool_shut_down_under_a_job_reports_every_block() -> None:
    """``close(wait=False)`` cancels the pool's queued calls: those blocks are reported
    cancelled, the running ones finish, and the job ends."""
    pool, gate = ThreadPoolExecutor(2), threading.Event()
    attempts = [Blocking(pool, i.to_bytes(4, "big"), gate=gate) for i in range(40)]
    job = TransferJob("upload", attempts, window=8, settings=SETTINGS)
    _wait_until_running(attempts, 2)
    closing = threading.Thread(
        target=pool.shutdown, kwargs={"wait": False, "cancel_futures": True}
    )  # what close(wait=False) does; the completions it runs submit to that pool
    closing.start()
    closing.join(10)
    assert not closing.is_alive(), "the pool's shutdown deadlocked on a completion"
    gate.set()  # the two running calls finish only after the queue was cancelled
    report = job.wait(30)
    pool.shutdown()
    assert report.count == 40 and 0 < len(report.done) < 40
    assert set(report.failed.values()) == {"cancelled"}


def test_cancel_drops_the_pools_queued_calls() -> None:
    """The two calls running when the job is cancelled finish; the 38 queued never run."""
    gate = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        attempts = [Blocking(pool, i.to_bytes(4, "big"), gate=gate) for i in range(40)]
        job = TransferJob("upload", attempts, window=40, settings=SETTINGS)
        _wait_until_running(attempts, 2)
        job.cancel()
        gate.set()
        report = job.wait(30)
    assert report.count == 40 and len(report.done) == 2
    assert set(report.failed.values()) == {"cancelled"}
    assert sum(1 for a in attempts if a.attempts) == 2  # queued calls never ran


def _wait_until_running(attempts: list[Blocking], running: int) -> None:
    deadline = time.monotonic() + 10
    while sum(1 for a in attempts if a.attempts) < running:
        assert time.monotonic() < deadline, "the pool never started the calls"
        time.sleep(0.001)


def test_a_batch_submitted_from_a_completion_still_runs_on_the_whole_pool() -> None:
    """An on_done that submits the next batch runs on a pool thread; that batch's first
    window still goes to the pool's threads, not one after another on that thread."""
    with ThreadPoolExecutor(4) as pool:
        threads: set[str] = set()
        second: list[TransferJob] = []
        together = threading.Barrier(4, timeout=10)  # breaks unless 4 calls run at once

        class Named(Blocking):
            def call(self) -> BlockResult:
                threads.add(threading.current_thread().name)
                together.wait()
                return super().call()

        def next_batch(_: TransferJob) -> None:
            attempts = [Named(pool, bytes([i]) * 8) for i in range(8)]
            second.append(TransferJob("upload", attempts, window=4, settings=SETTINGS))

        first = [Blocking(pool, b"f" * 8)]
        TransferJob("upload", first, window=1, settings=SETTINGS, on_done=next_batch).wait(30)
        deadline = time.monotonic() + 30
        while not second and time.monotonic() < deadline:
            time.sleep(0.01)
        report = second[0].wait(30)
    assert report.ok and len(report.done) == 8
    assert len(threads) == 4  # serially on one thread, it would be one
