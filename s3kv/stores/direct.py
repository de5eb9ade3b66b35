"""s3kv's direct data path: block GETs and PUTs whose bodies the kernel moves.

Why: awscrt hands a GET's body to Python as a ``bytes`` copy of its part buffer (itself
a copy of its socket buffer), s3kv then copied it into the caller's row, and a PUT's
body went to awscrt through a Python stream, chunk by chunk: every byte copied two or
three times in user space, on awscrt's event-loop threads. vLLM's object-store tier
copies once. Here worker threads send signed requests on kept-alive connections
(:mod:`.wire`) and the kernel reads a GET's body straight into the row
(``recv_into``) and sends a PUT's straight from it (``sendall``); over TLS, OpenSSL
decrypts into the row and encrypts from it. A thread waits in the kernel, without the
GIL.

Loads go first: a worker takes a GET before any queued PUT, so a prompt's load never
waits behind the stores of another. A load job of few large blocks reads each as ranged
parts on parallel connections (:meth:`Direct.plan`, :mod:`.direct_get`).

Cancelling a request shuts its connection down, which ends its reads and writes at once;
its ``done`` runs only after its threads left the caller's buffer.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from s3kv.errors import TransferCancelledError
from s3kv.errors import TransientStoreError as Transient
from s3kv.settings import S3Settings
from s3kv.stores.base import Cancel, ObjectInfo, PutOptions
from s3kv.stores.endpoint import DataEndpoint
from s3kv.stores.wire import Link, Links, Stale

T = TypeVar("T")
GetDone = Callable[[ObjectInfo | None, BaseException | None], None]
PutDone = Callable[[bool | None, BaseException | None], None]

MIN_PART_BYTES = 4 * 1024 * 1024
"""A block is split into ranged parts of at least this size (Ceph RGW stores objects in
4 MiB stripes; AWS's guidance for ranged GETs is 8-16 MiB parts)."""


class Task(Protocol):
    def run(self, direct: Direct) -> None:
        """Do the request and report it (never raises)."""


class Watched(Protocol):
    """What a request's connections are lent to: cancelling it shuts them down."""

    cancelled: bool

    def watch(self, link: Link) -> None: ...

    def unwatch(self, link: Link) -> None: ...


class Direct:
    """Worker threads, one connection each, for one endpoint."""

    def __init__(
        self,
        endpoint: DataEndpoint,
        credentials: Any,
        settings: S3Settings,
        *,
        connections: int,
    ) -> None:
        self.endpoint, self.credentials, self.settings = endpoint, credentials, settings
        self.connections = max(1, connections)
        self.links = Links(endpoint, settings, self.connections)
        self._loads: deque[Task] = deque()
        self._stores: deque[Task] = deque()
        self._ready = threading.Condition()
        self._workers = 0
        self._closed = False

    def plan(self, count: int, size: int, window: int) -> tuple[int, int]:
        """(parts per block, blocks in flight) for a load of ``count`` blocks of
        ``size`` bytes: enough parts that the job fills every connection, none under
        :data:`MIN_PART_BYTES`; as many blocks in flight as fill the connections."""
        parts = -(-self.connections // max(1, count))
        parts = max(1, min(parts, size // MIN_PART_BYTES))
        return parts, max(window, -(-self.connections // parts))

    def submit_get(
        self, key: str, where: str, buffer: memoryview, done: GetDone, *, parts: int = 1
    ) -> Cancel:
        """Read ``key`` (``where`` names it in messages) into ``buffer``, exactly its
        size, as ``parts`` ranged parts; ``done(info, error)`` once, on a worker."""
        from s3kv.stores.direct_get import GetBlock

        block = GetBlock(key, where, buffer, done)
        self._enqueue(block.parts(parts), load=True)
        return block.cancel

    def submit_put(
        self,
        key: str,
        where: str,
        body: memoryview,
        headers: list[tuple[str, str]],
        options: PutOptions,
        done: PutDone,
    ) -> Cancel:
        """Write ``body`` at ``key`` with ``headers`` (conditions, checksum, metadata,
        tags: what ``options`` say); ``done(created, error)`` once (``created`` False:
        create-only and it existed)."""
        from s3kv.stores.direct_put import PutTask

        task = PutTask(key, where, body, headers, options, done)
        self._enqueue([task], load=False)
        return task.cancel

    def exchange(self, owner: Watched, where: str, fn: Callable[[Link], tuple[T, bool]]) -> T:
        """``fn(link) -> (result, keep the link)`` on a lent link; once more on a fresh
        one if a kept-alive link turns out closed before the answer."""
        for fresh in (False, True):
            link, reused = self.links.checkout(fresh=fresh)
            owner.watch(link)
            keep = False
            try:
                result, keep = fn(link)
                return result
            except (Stale, ConnectionError) as exc:
                if owner.cancelled:
                    raise TransferCancelledError(f"{where}: cancelled") from None
                if not reused or fresh:
                    raise Transient(
                        f"{where}: {self.endpoint.url} closed the connection before an "
                        f"answer ({exc or 'end of stream'})"
                    ) from None
            finally:
                owner.unwatch(link)
                self.links.checkin(link, keep=keep and not owner.cancelled)
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        self.links.close()

    def _enqueue(self, tasks: list[Any], *, load: bool) -> None:
        with self._ready:
            (self._loads if load else self._stores).extend(tasks)
            while self._workers < self.connections and not self._closed:
                self._workers += 1
                threading.Thread(
                    target=self._work, name=f"s3kv-direct-{self._workers}", daemon=True
                ).start()
            self._ready.notify(len(tasks))

    def _work(self) -> None:
        while True:
            with self._ready:
                while not (self._loads or self._stores or self._closed):
                    self._ready.wait()
                if self._loads:
                    task = self._loads.popleft()
                elif self._stores:
                    task = self._stores.popleft()
                else:
                    return
            task.run(self)
