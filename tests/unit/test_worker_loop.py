"""The I/O process's loop (s3kv.worker.main.serve) answers a ping while a job starts.

Starting a job can take seconds (a store of large blocks is hashed before its requests go
out, where the store echoes no checksum); the engine kills a process that leaves its
ping unanswered for s3kv.vllm._io_process.HUNG_SECONDS. Seen in bench_prompt_load: a
1 GiB store of 32 MiB blocks over TLS had its I/O process killed as hung while it hashed.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, ClassVar

import pytest

from s3kv.worker import main as worker
from s3kv.worker.channel import Channel
from s3kv.worker.orders import PING, PONG, SHUTDOWN, Hello, Order, Ready

pytestmark = pytest.mark.unit


class SlowPath:
    """A data path whose job starts take until the test lets them go."""

    instances: ClassVar[list[SlowPath]] = []

    def __init__(self, config: Any, rows: Any, send: Any) -> None:
        self.release = threading.Event()
        self.submitted: list[int] = []
        self.cancelled = 0
        self.shut = False
        SlowPath.instances.append(self)

    def submit(self, order: Order) -> None:
        self.release.wait(10)
        self.submitted.append(order.job_id)

    def cancel_all(self) -> int:
        self.cancelled += 1
        return 0

    def shutdown(self, timeout: float) -> bool:
        self.shut = True
        return True


def _receive(channel: Channel, want: type | tuple[str, ...], timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if channel.readable(0.05):
            for message in channel.receive():
                if (isinstance(want, type) and isinstance(message, want)) or (
                    isinstance(want, tuple) and isinstance(message, tuple)
                    and message[0] == want[0]
                ):
                    return message
    raise AssertionError(f"no {want} within {timeout} s")


def test_a_ping_is_answered_while_a_job_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "DataPath", SlowPath)
    monkeypatch.setattr(worker, "map_region", lambda plan: None)
    monkeypatch.setattr(worker, "_logging", lambda level: None)  # no handler left behind
    ours, theirs = socket.socketpair()
    engine = Channel(ours)
    result: list[int] = []
    loop = threading.Thread(
        target=lambda: result.append(worker.serve(Channel(theirs), os.getppid(), None)),
        daemon=True,
    )
    loop.start()
    try:
        engine.send(Hello(config=None, region=None, log_level=0))  # type: ignore[arg-type]
        ready = _receive(engine, Ready, 5)
        assert isinstance(ready, Ready) and not ready.error
        (path,) = SlowPath.instances[-1:]
        engine.send(Order(7, "store", (b"k",), (0,)))
        engine.send(Order(8, "load", (b"k",), (1,)))
        time.sleep(0.2)  # job 7 is starting, and will be until released
        engine.send((PING, 1.0))
        pong = _receive(engine, (PONG,), 2)
        assert pong == (PONG, 1.0) and path.submitted == []
        path.release.set()
        engine.send((SHUTDOWN, 5.0))
        loop.join(5)
        assert result == [0] and path.shut
        assert path.submitted == [7, 8]  # in the order sent, before the shutdown
    finally:
        SlowPath.instances.clear()
        ours.close()
        theirs.close()
