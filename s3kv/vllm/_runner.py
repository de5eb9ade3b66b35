"""Off the scheduler thread: vLLM transfer jobs become s3kv jobs; finished ones queue up.

vLLM calls ``submit_store``/``submit_load`` under its scheduler lock, so they only
enqueue. One dispatcher thread slices the primary rows and starts the s3kv job (starting
one sends nothing the thread waits for: requests go to awscrt or to the transfer's pool,
and the manifest's re-check runs beside it); the thread that finishes a job's last block
queues its report for ``get_finished_jobs``. A job given a deadline (a load, by its
request's wait budget) is cancelled when it passes: its requests in flight end, nothing
more reaches its rows, and its blocks are reported failed (vLLM recomputes them). A job
the tier declines (:meth:`JobRunner.refuse`) is reported at the next poll, without I/O.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from vllm.v1.kv_offload.tiering.base import JobId, TransferJob

from s3kv.report import TransferReport
from s3kv.transfers.downloader import Downloader
from s3kv.transfers.jobs import TransferJob as S3Job
from s3kv.transfers.uploader import Uploader
from s3kv.vllm._budget import Deadlines

logger = logging.getLogger("s3kv.vllm")

Parents = Mapping[bytes, bytes]
"""A store job's keys to their parents' (:mod:`s3kv.vllm._chain`)."""

Transfers = tuple[Uploader, Downloader]
"""Whose prefix a job reads or writes (its tenant's); None: the runner's own."""


@dataclass(frozen=True, slots=True)
class Finished:
    """A vLLM job and what s3kv did with it (``report`` None: it never started)."""

    job: TransferJob
    report: TransferReport | None
    error: str = ""
    expired: bool = False
    """Cancelled when its deadline passed."""
    refused: bool = False
    """Declined by the tier (:meth:`JobRunner.refuse`): no request was sent."""


@dataclass(frozen=True, slots=True)
class _Queued:
    job: TransferJob
    parents: Parents
    deadline: float | None
    limit: int | None
    present: frozenset[bytes]
    transfers: Transfers | None = None


class JobRunner:
    """Runs stores (rows -> objects) and loads (objects -> rows) of one tier."""

    def __init__(
        self,
        rows: memoryview,
        block_size_bytes: int,
        uploader: Uploader,
        downloader: Downloader,
        *,
        on_finished: Callable[[Finished], None] | None = None,
        quiesce: Callable[[float], bool] | None = None,
        deadlines: Deadlines | None = None,
    ) -> None:
        self._rows = rows
        self._quiesce = quiesce
        self._block_size = block_size_bytes
        self._uploader = uploader
        self._downloader = downloader
        self._on_finished = on_finished
        self._deadlines = deadlines
        self._submitted: queue.SimpleQueue[_Queued | None] = queue.SimpleQueue()
        self._finished: queue.SimpleQueue[Finished] = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._in_flight = 0
        self._running: dict[JobId, S3Job] = {}  # guarded by _idle
        self._expired: set[JobId] = set()  # guarded by _idle
        self._closing = False
        self._thread = threading.Thread(
            target=self._dispatch, name="s3kv_vllm_dispatch", daemon=True
        )
        self._thread.start()

    # -- scheduler thread ---------------------------------------------------------------

    def submit(
        self,
        job: TransferJob,
        parents: Parents | None = None,
        *,
        deadline: float | None = None,
        limit: int | None = None,
        present: frozenset[bytes] = frozenset(),
        transfers: Transfers | None = None,
    ) -> None:
        """Queue a job; ``parents``: of a store job's keys (written with the blocks);
        ``deadline`` (``time.monotonic()``): cancel it then; ``present``: a store job's
        keys known stored (reported already present, nothing sent); ``limit``: store only
        the first of the others (the rest are reported failed); ``transfers``: the
        uploader and downloader of its tenant."""
        with self._idle:
            self._in_flight += 1
        self._submitted.put(_Queued(job, parents or {}, deadline, limit, present, transfers))

    def refuse(self, job: TransferJob, why: str) -> None:
        """Report a job failed at the next poll, without a request (and without a log
        line of its own: the tier counts them)."""
        with self._idle:
            self._in_flight += 1
        self._done(Finished(job, None, why, refused=True))

    def cancel_running(self) -> int:
        """Cancel every running job (the store stopped answering); how many."""
        with self._idle:
            running = list(self._running.values())
        for s3job in running:
            s3job.cancel()
        return len(running)

    def finished(self) -> list[Finished]:
        out = []
        while True:
            try:
                out.append(self._finished.get_nowait())
            except queue.Empty:
                return out

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every submitted job has finished; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def shutdown(self, *, timeout: float | None = None) -> None:
        """Drop jobs not yet started, cancel running ones (their requests in flight end)."""
        self._closing = True
        self._submitted.put(None)
        self._thread.join()
        with self._idle:
            running = list(self._running.values())
        for s3job in running:
            s3job.cancel()
        started = time.monotonic()
        if not self.wait_idle(timeout):
            logger.warning("s3kv tier shut down with %d job(s) still running", self._in_flight)
            return  # a running job may still touch the rows: keep them mapped
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        if self._quiesce is not None and not self._quiesce(30.0 if left is None else left):
            logger.warning("s3kv tier shut down with requests the transport still holds")
            return  # their callbacks still reach the rows: keep them mapped
        # vLLM unmaps the primary region after shutdown; a view of it left here makes
        # that fail ("cannot close exported pointers exist") and keeps it all mapped.
        self._rows.release()

    # -- dispatcher thread --------------------------------------------------------------

    def _dispatch(self) -> None:
        while True:
            item = self._submitted.get()
            if item is None:
                break
            job = item.job
            if self._closing:
                self._done(Finished(job, None, "shut down before it started"), report=False)
                continue
            if item.deadline is not None and time.monotonic() >= item.deadline:
                self._done(Finished(job, None, "its wait budget ran out before it started",
                                    expired=True))  # fmt: skip
                continue
            try:
                self._start(item)
            except Exception as exc:  # a job that cannot start still gets reported
                logger.exception("s3kv tier could not start job %s", job.job_id)
                self._done(Finished(job, None, f"{type(exc).__name__}: {exc}"))
        # Jobs queued after the sentinel were never started; vLLM drops them at shutdown.
        while True:
            try:
                late = self._submitted.get_nowait()
            except queue.Empty:
                return
            if late is not None:
                self._done(Finished(late.job, None, "shut down before it started"), report=False)

    def _start(self, item: _Queued) -> None:
        job, parents = item.job, item.parents
        uploader, downloader = item.transfers or (self._uploader, self._downloader)
        bs = self._block_size
        rows, keys = [], []
        for key, cid in zip(job.keys, job.chunk_ids):
            if key in item.present:
                continue
            c = int(cid)
            if c < 0 or (c + 1) * bs > len(self._rows):
                raise IndexError(f"chunk id {c} is outside the primary tier's rows")
            rows.append(self._rows[c * bs : (c + 1) * bs])
            keys.append(key)
        rows, keys = rows[: item.limit], keys[: item.limit]
        present = tuple(k for k in job.keys if k in item.present)
        if not keys:
            self._done(Finished(job, TransferReport("upload", already_present=present)))
            return

        def on_done(s3job: S3Job) -> None:
            with self._idle:
                expired = job.job_id in self._expired
                self._expired.discard(job.job_id)
            report = s3job.wait(0)
            if present:
                report = replace(report, already_present=report.already_present + present)
            self._done(Finished(job, report, expired=expired))

        if job.is_promotion:
            s3job = downloader.submit_get_blocks(keys, into=rows, on_done=on_done)
        else:
            s3job = uploader.submit_put_blocks(
                zip(keys, rows), on_done=on_done, parents=parents
            )
        with self._idle:
            # done() turns True before on_done runs, so a job that finished already is
            # never left here.
            if not s3job.done():
                self._running[job.job_id] = s3job
        if item.deadline is not None and self._deadlines is not None:
            self._deadlines.at(item.deadline, lambda: self._expire(job.job_id))

    def _expire(self, job_id: JobId) -> None:
        """A job's deadline passed: cancel it if it still runs."""
        with self._idle:
            s3job = self._running.get(job_id)
            if s3job is None or s3job.done():
                return
            self._expired.add(job_id)
        s3job.cancel()

    def _done(self, finished: Finished, *, report: bool = True) -> None:
        if report:
            if self._on_finished is not None:
                try:
                    self._on_finished(finished)
                except Exception:
                    logger.exception("s3kv tier: bookkeeping of job %s failed", finished.job.job_id)
            self._finished.put(finished)
        with self._idle:
            self._running.pop(finished.job.job_id, None)
            self._in_flight -= 1
            self._idle.notify_all()
