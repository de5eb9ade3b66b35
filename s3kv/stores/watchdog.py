"""Read timeouts and deadlines for awscrt's requests: one thread per store watches them all.

awscrt's S3 client has a connect timeout but no read timeout: a request whose server
stops answering ends only when its throughput check fires (1 byte/s over 30 s, then a
retry), holding its connection slot all along, and cancelling a job would not stop it.
A request is cancelled here (awscrt's ``S3Request.cancel()``, which also closes its
connection, so the slot is free for the retry) when it made no progress (no header, no
part of its body) for ``timeout`` seconds, or when it passed its deadline
(:func:`s3kv.stores.rules.attempt_seconds`: a body that trickles in at a byte a second
makes progress, and still ends).

Cost on the hot path: a request joins and leaves a set (no lock: single operations on
a set are atomic in CPython) and stamps the time on each header or body callback; the
thread wakes ``timeout / 40`` apart (at most once a second) and looks at the requests in
flight, never more than the client's connections.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

logger = logging.getLogger("s3kv")


class Watched(Protocol):
    last: float
    """``time.monotonic()`` of the last progress (may lie ahead: an allowance for a body
    being sent, of which awscrt reports no progress)."""
    deadline: float
    """``time.monotonic()`` by which the request must have ended."""

    def expire(self) -> None:
        """Cancel the request: it made no progress in time."""


class Watchdog:
    """Cancels requests that made no progress for ``timeout`` seconds, or passed their
    deadline."""

    def __init__(self, timeout: float, *, name: str = "s3kv-watchdog") -> None:
        self.timeout = timeout
        # a timeout fires at most 2.5% (or 1 s) late
        self.period = min(1.0, max(0.01, timeout / 40))
        self._live: set[Watched] = set()
        self._name = name
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stop = threading.Event()

    def watch(self, request: Watched) -> None:
        self._live.add(request)
        if self._thread is None:
            with self._start_lock:
                if self._thread is None and not self._stop.is_set():
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()

    def forget(self, request: Watched) -> None:
        self._live.discard(request)

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            now = time.monotonic()
            for request in list(self._live):
                if now - request.last > self.timeout or now > request.deadline:
                    self._live.discard(request)
                    try:
                        request.expire()
                    except Exception:  # one request's failure must not end every timeout
                        logger.exception("s3kv: cancelling a stalled request failed")
