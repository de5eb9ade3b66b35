"""Where the tier's data path runs: an I/O process beside EngineCore, or EngineCore itself.

The tier option ``io_process`` chooses: ``auto`` (the default) runs the data path
(:class:`s3kv.worker.datapath.DataPath`) in a process of its own when the primary tier's
rows are a shareable file mapping (vLLM's ``SharedOffloadRegion``:
:func:`s3kv.worker.region.plan_region`) and in EngineCore's process otherwise; ``on``
refuses to start without the process; ``off`` never starts one. The tier says once, at
start, which mode it runs in and why.

:class:`IoProcess` is EngineCore's side of the process, and never blocks the scheduler:
an order is one socket write, and :meth:`IoProcess.poll` reads what has arrived, only
when the process rang its :class:`~s3kv.worker.doorbell.Doorbell` (or every
:data:`LOOK_SECONDS`, for the end of its stream): vLLM polls on every scheduler step,
and a system call per step would starve EngineCore's other threads of the GIL. It
watches the process: a process that ends (end of file on its socket), stops answering
(no answer to a ping within :data:`HUNG_SECONDS` while it holds jobs) or keeps a job
past the job's own bound is killed and confirmed dead (``waitpid``) before its jobs
are reported failed (vLLM recomputes them: no request of a dead process can touch the
rows), then started again after a backoff (:data:`FIRST_BACKOFF_SECONDS`, doubling up
to :data:`MAX_BACKOFF_SECONDS`); meanwhile jobs are refused at once (recomputed, or not
stored) and the engine keeps serving. :meth:`IoProcess.close` returns once the process
has exited.

:class:`InProcessIo` runs the same data path on a dispatch thread of EngineCore's
process (vLLM calls ``submit_*`` under its scheduler lock: they only enqueue).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Literal, Protocol

from s3kv.errors import InvalidInputError, S3KVError
from s3kv.worker.channel import Channel, ChannelClosed
from s3kv.worker.datapath import DataPath
from s3kv.worker.doorbell import Doorbell
from s3kv.worker.orders import CANCEL_ALL, PING, SHUTDOWN, Hello, Order, PathConfig, Ready, Reply
from s3kv.worker.region import RegionPlan, RegionUnshareable, Rows, plan_region

logger = logging.getLogger("s3kv.vllm")

IoMode = Literal["auto", "on", "off"]
IO_MODES: tuple[IoMode, ...] = ("auto", "on", "off")

START_SECONDS = 30.0
"""How long the tier waits, at engine start, for its I/O process to map the rows."""
PING_AFTER_SECONDS = 0.5
"""Silence, while the process holds jobs, after which it is asked whether it runs."""
HUNG_SECONDS = 5.0
"""No answer to that question for this long: it is hung, and killed."""
ANSWER_GRACE_SECONDS = 10.0
"""Past a job's own bound (a load's deadline; a store's ``deadline_seconds``), how long
its answer may take (requests in flight end within their timeouts) before the process
is taken for broken."""
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0
HEALTHY_SECONDS = 60.0
"""A process that ran this long resets the backoff: its successor starts at once."""
KILL_WAIT_SECONDS = 10.0
MMAP_THRESHOLD_BYTES = 64 * 1024 * 1024
"""glibc's ``M_MMAP_THRESHOLD`` in the I/O process (``MALLOC_MMAP_THRESHOLD_``, unless the
environment sets its own). awscrt hands each GET request's body to Python as a new
``bytes``. When a request was up to 32 MiB, where glibc's own threshold stops rising,
each such body was a fresh mapping, faulted in page by page and unmapped when freed;
from the heap it reuses memory already mapped: a 1 GiB load of 32 MiB blocks on Ceph RGW
took 2.29 s instead of 2.77 s and 1.68 s of CPU per GiB instead of 2.22 (medians,
bench/evidence/io-process-malloc.json). Requests are at most 8 MiB now
(``crt_client.MAX_REQUEST_BYTES``), within glibc's adaptive range, yet without this
setting loads were still slower: 2.12 s against 1.866 s with 8 MiB blocks, at 1.418
against 1.238 s of CPU per GiB (bench/evidence/io-process-no-mmap-threshold.json)."""
LOOK_SECONDS = 0.05
"""With the doorbell silent, how often the socket is read anyway (a process that ended
says so only there, by the end of its stream)."""


class Io(Protocol):
    """Where orders run (see the module)."""

    mode: str

    def send(self, order: Order) -> bool:
        """Start the order's job; False: nothing can take it now (refuse it)."""

    def cancel_all(self) -> None: ...

    def poll(self, timeout: float = 0.0) -> list[Reply]:
        """The replies that arrived (waiting up to ``timeout`` for the first)."""

    def close(self, timeout: float) -> bool:
        """Stop: running jobs cancelled, their requests ended; True when nothing can
        reach the rows any more."""


class IoProcessError(S3KVError):
    """The I/O process could not be started (``io_process="on"``)."""


def _pause(event: threading.Event | None, seconds: float) -> None:
    if event is not None:
        event.wait(seconds)


class InProcessIo:
    """The data path in EngineCore's process, on a dispatch thread of its own."""

    mode = "in-process"

    def __init__(self, config: PathConfig, view: memoryview) -> None:
        self._replies: queue.SimpleQueue[Reply] = queue.SimpleQueue()
        self.path = DataPath(config, Rows.of_view(view, config.row_bytes), self._replies.put)
        self._orders: queue.SimpleQueue[Order | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._dispatch, name="s3kv_vllm_dispatch",
                                         daemon=True)  # fmt: skip
        self._thread.start()

    def send(self, order: Order) -> bool:
        self._orders.put(order)
        return True

    def _dispatch(self) -> None:
        while (order := self._orders.get()) is not None:
            self.path.submit(order)

    def cancel_all(self) -> None:
        self.path.cancel_all()

    def poll(self, timeout: float = 0.0) -> list[Reply]:
        out: list[Reply] = []
        try:
            out.append(self._replies.get(timeout=timeout) if timeout > 0 else
                       self._replies.get_nowait())  # fmt: skip
            while True:
                out.append(self._replies.get_nowait())
        except queue.Empty:
            return out

    def close(self, timeout: float) -> bool:
        self._orders.put(None)
        self._thread.join()
        return self.path.shutdown(timeout)


class IoProcess:
    """EngineCore's side of the I/O process (see the module)."""

    mode = "io-process"

    def __init__(self, config: PathConfig, plan: RegionPlan, *,
                 start_seconds: float = START_SECONDS) -> None:  # fmt: skip
        self._config, self._plan = config, plan
        self._lock = threading.RLock()
        self._answer_by: dict[int, float] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._channel: Channel | None = None
        self._doorbell: Doorbell | None = None
        self._look_at = 0.0
        self._ready = False
        self._heard = self._pinged = 0.0
        self._up_since = 0.0
        self._backoff = FIRST_BACKOFF_SECONDS
        self._restart_at = 0.0
        self._closed = False
        self.restarts = 0
        """Processes started after the first (a crash, a hang): a running total."""
        self.deaths: list[str] = []
        """Why each process before the current one ended (the last 20)."""
        self._spawn()
        self._wait_ready(start_seconds)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -- the process --------------------------------------------------------------------

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        doorbell = Doorbell()
        command = [sys.executable, "-m", "s3kv.worker", "--socket", str(theirs.fileno()),
                   "--doorbell", str(doorbell.fd), "--parent", str(os.getpid())]  # fmt: skip
        if threading.current_thread() is threading.main_thread():
            command.append("--pdeathsig")  # the signal follows the thread that started it
        env = dict(os.environ)
        here = str(Path(__file__).resolve().parents[2])  # this s3kv, wherever it came from
        env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD_BYTES))
        try:
            self._proc = subprocess.Popen(
                command, pass_fds=(theirs.fileno(), doorbell.fd, *self._plan.fds),
                close_fds=True, stdin=subprocess.DEVNULL, env=env,
            )  # fmt: skip
        except BaseException:
            doorbell.close()
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._channel, self._doorbell = Channel(ours), doorbell
        self._ready = False
        self._heard = self._up_since = time.monotonic()
        self._pinged = 0.0
        level = logging.getLogger("s3kv").getEffectiveLevel()
        self._channel.send(Hello(self._config, self._plan, level))

    def _wait_ready(self, seconds: float) -> None:
        """At engine start: the first process maps the rows, or the tier does not start."""
        until = time.monotonic() + seconds
        while not self._ready:
            left = until - time.monotonic()
            channel = self._channel
            if channel is None:
                why = self.deaths[-1] if self.deaths else "it ended"
                raise IoProcessError(f"the I/O process could not start: {why}")
            if left <= 0:
                self._bury(f"did not map the rows within {seconds:g} s")
                raise IoProcessError(f"the I/O process did not start within {seconds:g} s")
            channel.readable(min(left, 0.5))
            self._read()

    def _bury(self, why: str) -> list[Reply]:
        """Kill the process, wait for it to be gone, and fail its jobs."""
        proc, channel, doorbell = self._proc, self._channel, self._doorbell
        self._proc = self._channel = self._doorbell = None
        if proc is not None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
            try:
                code = proc.wait(KILL_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                code = None
                logger.error("s3kv tier: the I/O process %d did not end within %g s of "
                             "SIGKILL", proc.pid, KILL_WAIT_SECONDS)  # fmt: skip
            if code is not None and code < 0 and why == "ended":
                why = f"was killed by signal {-code}"
            elif code is not None and why == "ended":
                why = f"exited with status {code}"
        if channel is not None:
            channel.close()
        if doorbell is not None:
            doorbell.close()
        failed = [Reply(job_id, None, f"the I/O process {why}; the job did not finish")
                  for job_id in self._answer_by]  # fmt: skip
        self._answer_by.clear()
        now = time.monotonic()
        if now - self._up_since >= HEALTHY_SECONDS:
            self._backoff = FIRST_BACKOFF_SECONDS
        self._restart_at = now + self._backoff
        pid = proc.pid if proc is not None else "?"
        logger.warning(
            "s3kv tier: the I/O process %s %s; %d job(s) reported failed (vLLM recomputes "
            "loads); a new one starts in %.1f s", pid, why, len(failed), self._backoff,
        )  # fmt: skip
        self.deaths = [*self.deaths[-19:], why]
        self._backoff = min(self._backoff * 2, MAX_BACKOFF_SECONDS)
        return failed

    def _read(self) -> list[Reply]:
        channel = self._channel
        if channel is None:
            return []
        try:
            channel.flush()
            messages = channel.receive()
        except ChannelClosed:
            return self._bury("ended")
        replies: list[Reply] = []
        if messages:
            self._heard, self._pinged = time.monotonic(), 0.0
        for message in messages:
            if isinstance(message, Reply):
                if self._answer_by.pop(message.job_id, None) is not None:
                    replies.append(message)
            elif isinstance(message, Ready):
                if message.error:
                    return replies + self._bury(f"could not map the rows: {message.error}")
                self._ready = True
        return replies

    # -- EngineCore's calls -------------------------------------------------------------

    def send(self, order: Order) -> bool:
        with self._lock:
            channel = self._channel
            if channel is None or self._closed:
                return False
            if not self._answer_by:
                self._heard = time.monotonic()  # silence counts from the first job on
            bound = order.deadline
            if bound is None:
                bound = time.monotonic() + self._config.settings.deadline_seconds
            self._answer_by[order.job_id] = bound + ANSWER_GRACE_SECONDS
            try:
                channel.send(order)
            except ChannelClosed:
                pass  # the next poll finds it gone and answers the job
            return True

    def cancel_all(self) -> None:
        with self._lock:
            if self._channel is not None:
                try:
                    self._channel.send(CANCEL_ALL)
                except ChannelClosed:
                    pass

    def poll(self, timeout: float = 0.0) -> list[Reply]:
        with self._lock:
            channel, doorbell = self._channel, self._doorbell
            now = time.monotonic()
            replies: list[Reply] = []
            if channel is not None and doorbell is not None and (
                timeout > 0 or channel.pending_bytes or doorbell.rang() or now >= self._look_at
            ):
                if timeout > 0 and not channel.pending_bytes:
                    channel.readable(timeout)
                replies = self._read()
                now = time.monotonic()
                self._look_at = now + LOOK_SECONDS
            if self._channel is not None and self._answer_by:
                late = min(self._answer_by.values()) < now
                if late:
                    replies += self._bury("kept a job past its bound; killed")
                elif self._pinged and now - self._pinged > HUNG_SECONDS:
                    replies += self._bury(f"stopped answering for {HUNG_SECONDS:g} s; killed")
                elif not self._pinged and now - self._heard > PING_AFTER_SECONDS:
                    self._pinged = now
                    try:
                        self._channel.send((PING, now))
                    except ChannelClosed:
                        pass
            if self._channel is None and not self._closed and now >= self._restart_at:
                self.restarts += 1
                try:
                    self._spawn()
                except OSError as exc:
                    self._bury(f"could not be started again: {exc}")
            return replies

    def close(self, timeout: float) -> bool:
        with self._lock:
            self._closed = True
            proc, channel = self._proc, self._channel
            if channel is not None:
                try:
                    channel.send((SHUTDOWN, timeout))
                    channel.flush()
                except ChannelClosed:
                    pass
        clean = False
        if proc is not None:
            try:
                clean = proc.wait(timeout + 5.0) == 0
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        else:
            clean = True
        if channel is not None:
            channel.close()
        if self._doorbell is not None:
            self._doorbell.close()
        self._proc = self._channel = self._doorbell = None
        self._answer_by.clear()
        self._plan.close()
        return clean


def open_io(config: PathConfig, view: memoryview, mode: str) -> tuple[Io, str]:
    """The tier's data path by its ``io_process`` option; and why, when in-process."""
    if mode not in IO_MODES:
        raise InvalidInputError(
            f"io_process {mode!r} is not one of auto, on, off (auto: a process of its own "
            "where the rows can be shared)"
        )
    if mode == "off":
        return InProcessIo(config, view), "io_process is off"
    try:
        plan = plan_region(view, config.row_bytes)
    except RegionUnshareable as exc:
        if mode == "on":
            raise IoProcessError(f"io_process is on, but {exc}") from None
        return InProcessIo(config, view), str(exc)
    try:
        return IoProcess(config, plan), ""
    except IoProcessError as exc:
        plan.close()
        if mode == "on":
            raise
        return InProcessIo(config, view), str(exc)
