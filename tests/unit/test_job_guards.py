"""No exception in a completion can strand a job (issue 12, point 5): whatever a store
callback or a give-up raises, the block is reported failed and the job finishes."""

from __future__ import annotations

import threading
import time

import pytest

from s3kv import S3Settings
from s3kv.errors import ObjectNotFoundError
from s3kv.transfers.jobs import BlockResult, Done, TransferJob

pytestmark = pytest.mark.unit

SETTINGS = S3Settings.resolve({}, max_attempts=2, backoff_base_seconds=0.001)


class RaisingCallback:
    """Its transport callback raises (as a BufferError in awscrt's on_body would)."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    def start(self, done: Done) -> None:
        def finished() -> None:
            raise BufferError("memoryview: underlying buffer is not C-contiguous")

        # the transport runs the callback on its own thread and swallows what it raises
        def transport() -> None:
            try:
                done.guard(finished)()  # type: ignore[attr-defined]
            except BaseException:
                pass

        threading.Thread(target=transport).start()

    def give_up(self, reason: str) -> BlockResult:
        return BlockResult(self.key, "failed", reason=reason)


class RaisingGiveUp:
    """Fails, then its give-up (e.g. zeroing the buffer) raises too."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    def start(self, done: Done) -> None:
        threading.Timer(0.001, done, (None, ObjectNotFoundError("gone"))).start()

    def give_up(self, reason: str) -> BlockResult:
        raise BufferError("cannot zero a strided buffer")


class Fine:
    def __init__(self, key: bytes) -> None:
        self.key = key

    def start(self, done: Done) -> None:
        threading.Timer(0.001, done, (BlockResult(self.key, "done", nbytes=1), None)).start()

    def give_up(self, reason: str) -> BlockResult:
        return BlockResult(self.key, "failed", reason=reason)


@pytest.mark.parametrize("kind", [RaisingCallback, RaisingGiveUp])
def test_an_exception_in_a_completion_fails_the_block_and_the_job_finishes(kind: type) -> None:
    bad, good = kind(b"b" * 8), Fine(b"g" * 8)
    job = TransferJob("download", [bad, good], window=2, settings=SETTINGS)
    report = job.wait(10)  # today: TimeoutError, the job never finishes
    assert job.done() and report.done == (good.key,)
    assert "BufferError" in report.failed[bad.key]


def test_a_completion_reported_twice_counts_once() -> None:
    class Twice(Fine):
        def start(self, done: Done) -> None:
            done(BlockResult(self.key, "done", nbytes=1), None)
            done(None, RuntimeError("late"))

    job = TransferJob("upload", [Twice(b"t" * 8), Fine(b"f" * 8)], window=2, settings=SETTINGS)
    report = job.wait(10)
    assert sorted(report.done) == [b"f" * 8, b"t" * 8] and not report.failed


class Interrupted:
    """Ctrl-C lands inside its start(), on the thread starting the job."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.given_up: list[str] = []

    def start(self, done: Done) -> None:
        raise KeyboardInterrupt

    def give_up(self, reason: str) -> BlockResult:
        self.given_up.append(reason)
        return BlockResult(self.key, "failed", reason=reason)


class Held(Fine):
    """Finishes when the test says so: until then no completion can start the next block
    on its own thread (where Ctrl-C never lands), however slowly the job's thread runs."""

    def __init__(self, key: bytes) -> None:
        super().__init__(key)
        self.release = threading.Event()

    def start(self, done: Done) -> None:
        def finish() -> None:
            self.release.wait(10)
            done(BlockResult(self.key, "done", nbytes=1), None)

        threading.Thread(target=finish).start()


def test_ctrl_c_inside_a_start_cancels_the_job_and_reaches_its_caller() -> None:
    """Not a block's 'unexpected KeyboardInterrupt' with the job going on: the block and
    those not started are given up as cancelled, the job ends, the caller hears Ctrl-C."""
    first, second, third = Held(b"a" * 8), Interrupted(b"b" * 8), Interrupted(b"c" * 8)
    made: list[TransferJob] = []
    with pytest.raises(KeyboardInterrupt):
        TransferJob("download", [first, second, third], window=3, settings=SETTINGS,
                    on_done=made.append)
    assert second.given_up == third.given_up == ["cancelled"]
    first.release.set()  # the block in flight ends on its own
    deadline = time.monotonic() + 5
    while not made and time.monotonic() < deadline:
        time.sleep(0.001)
    report = made[0].wait(5)
    assert made[0].cancelled and report.failed == {b"b" * 8: "cancelled", b"c" * 8: "cancelled"}
    assert report.done == (b"a" * 8,)
