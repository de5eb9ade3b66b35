"""The I/O process: ``python -m s3kv.worker --socket FD --doorbell FD --parent PID``.

Started by the tier with fork+exec (``subprocess``; never a fork of EngineCore, which has
threads, and awscrt does not survive a fork), handed one end of a socket pair and a
descriptor of each file behind the primary tier's rows (``pass_fds``), and a
:class:`~s3kv.worker.doorbell.Doorbell` it rings with every message. Its first message
(:class:`~s3kv.worker.orders.Hello`) says what to map and run; it answers
:class:`~s3kv.worker.orders.Ready` (or why it cannot), then runs the orders it is sent on
a :class:`~s3kv.worker.datapath.DataPath` and sends each job's reply from a thread of
its own (a full socket never stalls the client's threads).

It ends with its engine, however the engine ends: at the end of file on its socket, when
the engine's process exits (a pidfd of it, watched beside the socket: immediate, and
about the process, not the thread that started it), and, when the tier started it from
the main thread, by ``PR_SET_PDEATHSIG`` too. Ctrl-C in a terminal is the engine's to
act on: this process ignores SIGINT and is told to stop. It holds the engine's rights
and no more: the same user, the engine's environment, only the descriptors it was given.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import queue
import select
import signal
import socket
import sys
import threading

from s3kv.worker.channel import Channel, ChannelClosed
from s3kv.worker.datapath import DataPath
from s3kv.worker.doorbell import Doorbell
from s3kv.worker.orders import CANCEL_ALL, PING, PONG, SHUTDOWN, Hello, Order, Ready
from s3kv.worker.region import map_region

PR_SET_PDEATHSIG = 1
PARENT_POLL_SECONDS = 0.2
"""Where no pidfd can be had (Linux before 5.3): how often the parent is looked for."""

logger = logging.getLogger("s3kv")


def _die_with_parent(parent: int, *, pdeathsig: bool) -> int | None:
    """Arrange to end with ``parent``; a pidfd to watch, or None (then poll)."""
    if pdeathsig:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    watch: int | None = None
    try:
        watch = os.pidfd_open(parent)
    except (AttributeError, OSError):
        watch = None
    if os.getppid() != parent:  # the engine ended before any of that was in place
        os._exit(0)
    return watch


def _gone(parent: int) -> None:
    """The engine is gone: nothing is left to tell or to keep (its rows included)."""
    os._exit(0)


def _writer(channel: Channel, outgoing: queue.SimpleQueue[object]) -> None:
    while True:
        message = outgoing.get()
        if message is None:
            return
        try:
            channel.send(message)
        except ChannelClosed:
            os._exit(0)


def _logging(level: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s s3kv-io[{os.getpid()}] %(levelname)s %(name)s: %(message)s"
    ))  # fmt: skip
    root = logging.getLogger("s3kv")
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False


def serve(channel: Channel, parent: int, watch: int | None) -> int:
    """Take the hello, then run orders until told to stop or the engine is gone.

    This loop only reads: it answers a ping at once and hands everything else, in order,
    to a thread of its own (:func:`_dispatch`). Starting a job can take seconds (a store
    of large blocks is hashed before its requests go out, on a store that echoes no
    checksum), and a ping unanswered for that long would have the engine kill a process
    that is only busy."""
    waits: list[int | socket.socket] = [channel.sock] + ([watch] if watch is not None else [])
    timeout = None if watch is not None else PARENT_POLL_SECONDS
    pending: list[object] = []
    path: DataPath | None = None
    outgoing: queue.SimpleQueue[object] = queue.SimpleQueue()
    orders: queue.SimpleQueue[object] = queue.SimpleQueue()
    ended: list[int] = []
    dispatcher: threading.Thread | None = None
    while True:
        ready, _, _ = select.select(waits, [], [], timeout)
        if (watch is not None and watch in ready) or os.getppid() != parent:
            _gone(parent)
        if channel.sock not in ready:
            continue
        try:
            pending.extend(channel.receive())
        except ChannelClosed:
            _gone(parent)
        while pending:
            message = pending.pop(0)
            if path is None:
                path = _start(channel, message, outgoing)
                if path is None:
                    return 2
                dispatcher = threading.Thread(
                    target=_dispatch, args=(path, orders, outgoing, ended),
                    name="s3kv-io-dispatch", daemon=True,
                )  # fmt: skip
                dispatcher.start()
            elif isinstance(message, tuple) and message[0] == PING:
                outgoing.put((PONG, message[1]))  # behind the replies queued before it
            elif message == CANCEL_ALL:
                path.cancel_all()  # now: jobs still queued start after it, as sent
            else:
                orders.put(message)
                if isinstance(message, tuple) and message[0] == SHUTDOWN:
                    assert dispatcher is not None
                    dispatcher.join()
                    logging.shutdown()
                    return ended[0] if ended else 1


def _dispatch(path: DataPath, orders: queue.SimpleQueue[object],
              outgoing: queue.SimpleQueue[object], ended: list[int]) -> None:  # fmt: skip
    """Start each order's job, in the order sent; at the shutdown, stop the data path."""
    while True:
        message = orders.get()
        if isinstance(message, Order):
            path.submit(message)
        elif isinstance(message, tuple) and message[0] == SHUTDOWN:
            clean = path.shutdown(float(message[1]))
            outgoing.put(None)
            ended.append(0 if clean else 1)
            return


def _start(channel: Channel, hello: object,
           outgoing: queue.SimpleQueue[object]) -> DataPath | None:  # fmt: skip
    if not isinstance(hello, Hello):
        channel.send(Ready(os.getpid(), f"expected a hello, got {type(hello).__name__}"))
        return None
    _logging(hello.log_level)
    try:
        rows = map_region(hello.region)  # type: ignore[arg-type]
        path = DataPath(hello.config, rows, outgoing.put)
    except Exception as exc:
        channel.send(Ready(os.getpid(), f"{type(exc).__name__}: {exc}"))
        return None
    threading.Thread(target=_writer, args=(channel, outgoing), name="s3kv-io-writer",
                     daemon=True).start()  # fmt: skip
    channel.send(Ready(os.getpid()))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m s3kv.worker", description=__doc__)
    parser.add_argument("--socket", type=int, required=True, help="descriptor of the socket")
    parser.add_argument("--doorbell", type=int, required=True,
                        help="descriptor of the doorbell rung with every message sent")
    parser.add_argument("--parent", type=int, required=True, help="the engine's process id")
    parser.add_argument("--pdeathsig", action="store_true",
                        help="also end by PR_SET_PDEATHSIG (started from a main thread)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the engine's: it stops us
    watch = _die_with_parent(args.parent, pdeathsig=args.pdeathsig)
    sock = socket.socket(fileno=args.socket)
    sock.setblocking(True)
    code = serve(Channel(sock, Doorbell(args.doorbell)), args.parent, watch)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # awscrt's threads end with the process, not by teardown
