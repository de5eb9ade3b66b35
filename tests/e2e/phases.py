"""A store's bad day, phase by phase: a proxy in front of Ceph RGW that the test switches.

:class:`PhasedProxy` is tests/faults/proxy.py's ``FaultProxy`` whose fault is the current
phase's, with two more a real outage has:

``healthy``
    everything forwarded.
``stall``
    every request read and never answered (a store that hangs: its threads stuck); a
    connection stalled stays so after the phase (the client's timeouts end it).
``refuse``
    nothing listens on the port: connections are refused, and those open are reset (the
    store's process killed); the port listens again when the phase ends.
``manifest-stall``
    only requests for the namespace's manifest (``config.json``) stall.
``slow``
    every body, both ways, flows at ``rate`` bytes a second shared by every connection (a
    saturated link).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Any, BinaryIO

from tests.faults.proxy import FaultProxy, Request

PHASES = ("healthy", "stall", "refuse", "manifest-stall", "slow")
CHUNK = 16 * 1024


class PhasedProxy(FaultProxy):
    def __init__(self, upstream: str, *, rate: float = 1024 * 1024) -> None:
        self.phase = "healthy"
        self.rate = rate
        self.switched: list[tuple[str, float]] = [("healthy", time.monotonic())]
        """Each phase and when it began."""
        self._pace = threading.Lock()
        self._free_at = 0.0
        self._fast = threading.Event()  # set when the slow phase ends: waits end
        super().__init__(upstream, self._fault)
        # listen again, reusable: the connections it accepts share the flag, so that
        # the port can listen again after ``refuse`` while some of them linger
        self._stop_listening()
        self._listen_again()

    def set_phase(self, phase: str) -> float:
        """Switch to ``phase``; returns when (``time.monotonic()``)."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; one of {PHASES}")
        if phase == "refuse" and self.phase != "refuse":
            self._stop_listening()
        elif self.phase == "refuse" and phase != "refuse":
            self._listen_again()
        if phase == "slow":
            self._fast.clear()
        else:
            self._fast.set()  # the link is fast again, for what is in flight too
            self._free_at = 0.0
        self.phase = phase
        at = time.monotonic()
        self.switched.append((phase, at))
        return at

    def _fault(self, request: Request) -> str | None:
        if self.phase == "stall":
            return "stall"
        if self.phase == "manifest-stall" and request.path.endswith("/config.json"):
            return "stall"
        return None

    # -- refuse ---------------------------------------------------------------------------

    def _accept(self) -> None:
        """FaultProxy's accept loop, waking every 0.1 s: a socket closed while a thread
        is blocked in ``accept`` would go on listening until a connection came."""
        sock = self.sock
        sock.settimeout(0.1)
        while not self.closed.is_set() and sock is self.sock:
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self.lock:
                self.connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _stop_listening(self) -> None:
        listening, self.sock = self.sock, socket.socket()  # the accept loop ends
        time.sleep(0.3)
        listening.close()  # new connections are refused
        with self.lock:
            conns, self.connections = self.connections, []
        for conn in conns:  # reset now (a close waits for the handler's file objects)
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()

    def _listen_again(self) -> None:
        self.sock.close()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(256)
        self.sock = sock
        threading.Thread(target=self._accept, daemon=True).start()

    # -- slow -----------------------------------------------------------------------------

    def _paced(self, nbytes: int) -> None:
        """Wait until ``nbytes`` more may move at ``rate`` (one clock for every connection)."""
        if self.phase != "slow":
            return
        with self._pace:
            start = max(time.monotonic(), self._free_at)
            self._free_at = start + nbytes / self.rate
            until = self._free_at
        self._fast.wait(max(0.0, until - time.monotonic()))

    def _body(self, conn: Any, request: Request, body: bytes) -> None:
        if self.phase != "slow":
            super()._body(conn, request, body)
            return
        view = memoryview(body)
        for at in range(0, len(view), CHUNK):
            piece = view[at : at + CHUNK]
            self._paced(len(piece))
            conn.sendall(piece)
            request.sent += len(piece)

    def _read_request(self, conn: Any, reader: BinaryIO) -> Request | None:
        request = super()._read_request(conn, reader)
        if request is not None and request.body and self.phase == "slow":
            self._paced(len(request.body))  # an upload through the same link
        return request
