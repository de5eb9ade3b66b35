"""Non-blocking batches: submit, then poll, wait or cancel. Driven by vLLM's scheduler."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Literal

from s3kv.errors import S3KVError, TransferCancelledError
from s3kv.report import TransferReport

Outcome = Literal["done", "already_present", "missing", "failed"]


@dataclass(frozen=True, slots=True)
class BlockResult:
    key: bytes
    outcome: Outcome
    nbytes: int = 0
    reason: str = ""
    verified: bool = True
    data: bytes | None = None


class TransferJob:
    """A batch in flight on a shared thread pool.

    ``done()`` never blocks; ``wait()`` blocks (optionally with a timeout) and returns the
    :class:`TransferReport`; ``cancel()`` stops blocks that have not started (they are
    reported failed with reason "cancelled") and lets running ones finish.

    Up to ``parallelism`` workers pull blocks from the batch until it is empty: one pool
    task per worker rather than per block, so a batch of thousands of small blocks costs
    no per-block future, callback or lock handoff.
    """

    def __init__(
        self,
        operation: Literal["upload", "download"],
        executor: Executor,
        tasks: Sequence[tuple[bytes, Callable[[threading.Event], BlockResult]]],
        *,
        parallelism: int,
        on_done: Callable[[TransferJob], None] | None = None,
    ) -> None:
        self._init_state(operation, on_done)
        self._queue = deque(tasks)
        workers = min(len(tasks), max(1, parallelism))
        self._workers_left = workers
        if not tasks:
            self._finish()
            return
        for _ in range(workers):
            future = executor.submit(self._work)
            self._futures.append(future)
            future.add_done_callback(self._worker_done)

    def _init_state(
        self,
        operation: Literal["upload", "download"],
        on_done: Callable[[TransferJob], None] | None,
    ) -> None:
        self.operation = operation
        self._started = time.perf_counter()
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._results: list[BlockResult] = []
        self._report: TransferReport | None = None
        self._on_done = on_done
        self._futures: list[Future[None]] = []

    def _work(self) -> None:
        queue, results = self._queue, self._results
        while True:
            try:
                key, task = queue.popleft()
            except IndexError:
                return
            results.append(self._run(key, task))  # list.append is atomic

    def _run(self, key: bytes, task: Callable[[threading.Event], BlockResult]) -> BlockResult:
        if self._cancel.is_set():
            return BlockResult(key, "failed", reason="cancelled")
        try:
            return task(self._cancel)
        except TransferCancelledError:
            return BlockResult(key, "failed", reason="cancelled")
        except S3KVError as exc:
            return BlockResult(key, "failed", reason=str(exc))
        except Exception as exc:  # a bug must not lose the key: report it as failed
            return BlockResult(key, "failed", reason=f"unexpected {type(exc).__name__}: {exc}")

    def _worker_done(self, future: Future[None]) -> None:
        with self._lock:
            self._workers_left -= 1
            last = self._workers_left == 0
        if last:
            # Workers cancelled before they started leave their blocks in the queue.
            while self._queue:
                key, _ = self._queue.popleft()
                self._results.append(BlockResult(key, "failed", reason="cancelled"))
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

    def cancel(self) -> None:
        """Stop blocks not yet started; running ones finish (or stop retrying)."""
        self._cancel.set()
        for future in self._futures:
            future.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()
