"""vLLM transfer jobs as orders to the tier's data path; its replies as finished jobs.

vLLM calls ``submit_store``/``submit_load`` under its scheduler lock, so they only send
an order (:class:`s3kv.worker.orders.Order`: keys, rows, tenant, deadline) to where the
data path runs (:mod:`s3kv.vllm._io_process`: an I/O process, or a dispatch thread of
EngineCore's) and return. ``get_finished_jobs`` reads the replies that arrived, without
waiting: each is one job whose requests have all ended. A reply's requests go through
the tier's one request hook (``replay``: metrics, renewals, the store's health) before
the job is reported, in the order they ended. A job given a deadline (a load, by its
request's wait budget) is cancelled by the data path when it passes; its blocks are
reported failed (vLLM recomputes them). A job the tier declines (:meth:`JobRunner.refuse`),
or that no data path can take now (its process restarting), is reported at the next
poll, without I/O.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from vllm.v1.kv_offload.tiering.base import TransferJob

from s3kv.report import TransferReport
from s3kv.stores.base import RequestEvent
from s3kv.vllm._io_process import Io
from s3kv.worker.orders import Note, Order, Reply

logger = logging.getLogger("s3kv.vllm")

Parents = Mapping[bytes, bytes]
"""A store job's keys to their parents' (:mod:`s3kv.vllm._chain`)."""


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
    notes: tuple[Note, ...] = ()
    """What its requests met (:mod:`s3kv.worker.loads`), and the data path's other
    requests since its last reply."""
    replaced: frozenset[bytes] = frozenset()
    """A store's keys sent to replace a damaged copy (``If-Match``)."""


@dataclass(frozen=True, slots=True)
class _Pending:
    job: TransferJob
    present: tuple[bytes, ...]
    replaced: frozenset[bytes]


class JobRunner:
    """Runs stores (rows -> objects) and loads (objects -> rows) of one tier on ``io``."""

    def __init__(
        self,
        io: Io,
        *,
        on_finished: Callable[[Finished], None] | None = None,
        replay: Callable[[RequestEvent], None] | None = None,
    ) -> None:
        self.io = io
        self._on_finished = on_finished
        self._replay = replay
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}  # guarded by _lock
        self._ready: queue.SimpleQueue[Finished] = queue.SimpleQueue()  # no reply awaited
        self._closing = False

    # -- scheduler thread ---------------------------------------------------------------

    def submit(
        self,
        job: TransferJob,
        parents: Parents | None = None,
        *,
        tenant: str | None = None,
        deadline: float | None = None,
        limit: int | None = None,
        present: frozenset[bytes] = frozenset(),
        replace: Mapping[bytes, str] | None = None,
        manifest: bytes | None = None,
    ) -> None:
        """Send a job's order; ``parents``: of a store job's keys (written with the
        blocks); ``deadline`` (``time.monotonic()``): cancel it then; ``present``: a store
        job's keys known stored (reported already present, nothing sent); ``limit``: store
        only the first of the others (the rest are reported failed); ``tenant``: whose
        prefix; ``replace``: a store's keys whose damaged copy (that ETag) it replaces;
        ``manifest``: the tenant's manifest as found (the data path writes none first)."""
        if self._closing:
            self._refuse(job, "shut down before it started", report=False)
            return
        keys, chunks = [], []
        for key, cid in zip(job.keys, job.chunk_ids):
            if key not in present:
                keys.append(key)
                chunks.append(int(cid))
        keys, chunks = keys[:limit], chunks[:limit]
        known = tuple(k for k in job.keys if k in present)
        if not keys:
            self._ready.put(Finished(job, TransferReport("upload", already_present=known)))
            return
        replace = {k: replace[k] for k in keys if k in replace} if replace else {}
        order = Order(
            int(job.job_id), "load" if job.is_promotion else "store", tuple(keys),
            tuple(chunks), tenant, deadline, dict(parents or {}), replace, manifest,
        )  # fmt: skip
        with self._lock:
            self._pending[order.job_id] = _Pending(job, known, frozenset(replace))
        if not self.io.send(order):
            with self._lock:
                self._pending.pop(order.job_id, None)
            self._refuse(job, "the tier's I/O process is starting again")

    def refuse(self, job: TransferJob, why: str) -> None:
        """Report a job failed at the next poll, without a request (and without a log
        line of its own: the tier counts them)."""
        self._refuse(job, why)

    def _refuse(self, job: TransferJob, why: str, *, report: bool = True) -> None:
        self._ready.put(Finished(job, None, why, refused=report))

    def cancel_running(self) -> None:
        """Cancel every running job (the store stopped answering)."""
        self.io.cancel_all()

    def finished(self, timeout: float = 0.0) -> list[Finished]:
        """The jobs that ended since the last call (waiting up to ``timeout`` for one)."""
        out = []
        while True:
            try:
                out.append(self._ready.get_nowait())
            except queue.Empty:
                break
        for reply in self.io.poll(0.0 if out else timeout):
            done = self._done(reply)
            if done is not None:
                out.append(done)
        return out

    def _done(self, reply: Reply) -> Finished | None:
        if self._replay is not None:
            for event in reply.events:
                try:
                    self._replay(event)
                except Exception:
                    logger.exception("s3kv tier: a request's bookkeeping failed")
        with self._lock:
            pending = self._pending.pop(reply.job_id, None)
        if pending is None:
            return None
        report = reply.report
        if report is not None and pending.present:
            report = replace(report, already_present=report.already_present + pending.present)
        finished = Finished(pending.job, report, reply.error, reply.expired,
                            notes=reply.notes, replaced=pending.replaced)  # fmt: skip
        if self._on_finished is not None:
            try:
                self._on_finished(finished)
            except Exception:
                logger.exception("s3kv tier: bookkeeping of job %s failed", pending.job.job_id)
        return finished

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every job sent has ended (their results: the next poll); False
        on timeout."""
        until = None if timeout is None else time.monotonic() + timeout
        held: list[Finished] = []
        while True:
            with self._lock:
                idle = not self._pending
            if idle:
                break
            left = 0.5 if until is None else until - time.monotonic()
            if left <= 0:
                break
            held += self.finished(min(left, 0.5))
        for f in held:
            self._ready.put(f)  # reported at the next poll, as vLLM expects
        return idle

    def shutdown(self, *, timeout: float) -> None:
        """Drop jobs not yet started, cancel running ones; returns once nothing the
        tier started can reach the rows (the I/O process has exited)."""
        self._closing = True
        if not self.io.close(timeout):
            logger.warning("s3kv tier shut down with requests the transport still holds")
        with self._lock:
            self._pending.clear()  # cancelled: vLLM drops what it has not been told
