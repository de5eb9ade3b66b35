"""The tier's data path: orders run against the primary tier's rows, a reply per job.

One :class:`DataPath` runs in the I/O process (:mod:`s3kv.worker.main`) or, where the
rows cannot be shared, in EngineCore's process; the code is the same. It owns its store
(one client: awscrt, every request checked, retried and bounded as everywhere in s3kv)
and, per tenant, an :class:`~s3kv.transfers.uploader.Uploader` and a
:class:`~s3kv.worker.loads.TierDownloader` on it. A load's bytes go from the client
straight into its rows; a store's are sent from its rows.

:meth:`DataPath.submit` never waits on the network: it starts the job's requests and
returns. The thread that ends a job's last request sends its :class:`Reply`, with the
requests and notes gathered since the last reply. A load given a deadline is cancelled
when it passes: its requests in flight end, nothing more reaches its rows, its blocks
are reported failed (vLLM recomputes them). A job that cannot start (a chunk outside
the rows, a closed path) is answered at once, failed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from s3kv.naming.location import parse_location
from s3kv.stores import open_store
from s3kv.stores.base import RequestEvent
from s3kv.transfers.jobs import TransferJob
from s3kv.transfers.uploader import Uploader
from s3kv.worker.deadlines import Deadlines
from s3kv.worker.loads import TierDownloader
from s3kv.worker.orders import Note, Order, PathConfig, Reply
from s3kv.worker.region import Rows

logger = logging.getLogger("s3kv")

QUIESCE_SECONDS = 30.0
"""At shutdown, how long the client may take to let go of requests it reported ended."""


def _drain(items: deque[Any]) -> tuple[Any, ...]:
    out = []
    while True:
        try:
            out.append(items.popleft())
        except IndexError:
            return tuple(out)


class DataPath:
    """Runs :class:`Order` s against ``rows``; ``send`` gets each :class:`Reply` (from
    the thread that ended the job: it must not block)."""

    def __init__(self, config: PathConfig, rows: Rows, send: Callable[[Reply], None]) -> None:
        self.config = config
        self._rows = rows
        self._send = send
        settings = config.settings
        connections = 2 * config.concurrency
        if settings.max_connections is not None:
            connections = min(connections, settings.max_connections)
        self._location = parse_location(config.url)
        pool = settings.model_copy(update={"concurrency": connections})
        self.store = open_store(self._location, pool)
        self._events: deque[RequestEvent] = deque()
        self._notes: deque[Note] = deque()
        self.store.on_request = self._events.append
        self._waiting = settings.model_copy(update={"deadline_seconds": config.wait_seconds})
        self._transfers: dict[str | None, tuple[Uploader, TierDownloader]] = {}
        self._deadlines = Deadlines(name="s3kv-io-deadlines")
        self._idle = threading.Condition()
        self._in_flight = 0
        self._running: dict[int, TransferJob] = {}  # guarded by _idle
        self._expired: set[int] = set()  # guarded by _idle
        self._closing = False

    # -- orders -------------------------------------------------------------------------

    def submit(self, order: Order) -> None:
        """Start the order's job (never raises: a job that cannot start is answered)."""
        with self._idle:
            self._in_flight += 1
            closing = self._closing
        if closing:
            self._reply(order.job_id, None, "shut down before it started")
            return
        if order.deadline is not None and time.monotonic() >= order.deadline:
            self._reply(order.job_id, None, "its wait budget ran out before it started",
                        expired=True)  # fmt: skip
            return
        try:
            self._start(order)
        except Exception as exc:  # a job that cannot start still gets answered
            logger.warning("s3kv tier could not start job %s: %s", order.job_id, exc)
            self._reply(order.job_id, None, f"{type(exc).__name__}: {exc}")

    def _start(self, order: Order) -> None:
        rows = [self._rows.row(c) for c in order.chunks]
        uploader, downloader = self._for(order.tenant)
        job_id = order.job_id

        def on_done(job: TransferJob) -> None:
            with self._idle:
                self._running.pop(job_id, None)
                expired = job_id in self._expired
                self._expired.discard(job_id)
            self._reply(job_id, job.wait(0), expired=expired)

        if order.kind == "load":
            job = downloader.submit_get_blocks(order.keys, into=rows, on_done=on_done)
        else:
            if order.manifest is not None:
                uploader.adopt_manifest(order.manifest)
            for key, etag in order.replace.items():
                uploader.damaged[uploader.keys.key_for(key)] = etag
            job = uploader.submit_put_blocks(
                zip(order.keys, rows), on_done=on_done, parents=order.parents
            )
        with self._idle:
            # done() turns True before on_done runs, so a job that finished already is
            # never left here.
            if not job.done():
                self._running[job_id] = job
        if order.deadline is not None:
            self._deadlines.at(order.deadline, lambda: self._expire(job_id))

    def _for(self, tenant: str | None) -> tuple[Uploader, TierDownloader]:
        """The transfers of a tenant's prefix (the location's own for None), made on
        first use on the one store; a tenant's borrow the location's pools."""
        found = self._transfers.get(tenant)
        if found is not None:
            return found
        base = self._transfers.get(None) if tenant is not None else None
        if tenant is not None and base is None:
            base = self._for(None)
        where = self._location if tenant is None else self._location.for_tenant(tenant)
        c, config = self.config.concurrency, self.config
        pools: dict[str, Any] = {"up": {}, "down": {}}
        if base is not None:
            pools = {"up": {"executor": base[0].executor}, "down": {"executor": base[1].executor}}
        uploader = Uploader(where, config.namespace, settings=config.settings, style=config.style,
                            store=self.store, concurrency=2 * c,
                            vllm_version=config.vllm_version, **pools["up"])  # fmt: skip
        uploader.recheck_beside = True  # never a request on the thread that submits
        uploader.manifest_recheck_seconds = config.manifest_recheck_seconds
        uploader.on_write_refused = lambda exc: self._notes.append(
            Note("write_refused", detail=str(exc))
        )
        downloader = TierDownloader(
            where, config.namespace, settings=self._waiting, style=config.style,
            store=self.store, concurrency=c, notes=self._notes, damaged=uploader.damaged,
            require_checksum=config.require_checksum, **pools["down"],
        )  # fmt: skip
        self._transfers[tenant] = (uploader, downloader)
        return uploader, downloader

    def _expire(self, job_id: int) -> None:
        """A job's deadline passed: cancel it if it still runs."""
        with self._idle:
            job = self._running.get(job_id)
            if job is None or job.done():
                return
            self._expired.add(job_id)
        job.cancel()

    def _reply(self, job_id: int, report: Any, error: str = "", *, expired: bool = False) -> None:
        reply = Reply(job_id, report, error, expired, _drain(self._notes), _drain(self._events))
        try:
            self._send(reply)
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    # -- the whole path -----------------------------------------------------------------

    def cancel_all(self) -> int:
        """Cancel every running job (the store stopped answering); how many."""
        with self._idle:
            running = list(self._running.values())
        for job in running:
            job.cancel()
        return len(running)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every submitted job has been answered; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def shutdown(self, timeout: float) -> bool:
        """Answer no new order, cancel running jobs, wait for their requests to end and
        for the client to let go of them, then close; True when nothing can reach the
        rows any more (they are then released)."""
        started = time.monotonic()
        with self._idle:
            self._closing = True
        self.cancel_all()
        clean = self.wait_idle(timeout)
        if clean:
            left = max(0.0, timeout - (time.monotonic() - started))
            clean = self.store.quiesce(min(left, QUIESCE_SECONDS))
        self._deadlines.close()
        for uploader, downloader in self._transfers.values():
            downloader.close(wait=False)
            uploader.close(wait=False)
        if clean:
            self.store.close()
            self._rows.release()
        return clean
