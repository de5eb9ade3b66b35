"""Messages over a stream socket between EngineCore and its I/O process.

A frame is an 8-byte length, then that many bytes of pickle: a message arrives whole or
not yet, never torn, whatever the socket's buffers split. Both ends are one program's
(the worker is started by the tier, as the same user, on one end of a socket pair), so
pickle is no trust boundary here.

EngineCore's end never blocks (:meth:`Channel.send` keeps what the socket cannot take
yet and sends it with the next call; :meth:`Channel.receive` takes what has arrived);
the worker's end may (its own threads wait, not the engine's), and rings a
:class:`~s3kv.worker.doorbell.Doorbell` after each piece it sends, so that EngineCore
reads its socket only when something came.
"""

from __future__ import annotations

import pickle
import select
import socket
import struct
import threading

from s3kv.worker.doorbell import Doorbell

_LENGTH = struct.Struct("!Q")
MAX_FRAME_BYTES = 1 << 30
"""A frame longer than this is a broken stream, not a message."""
_READ_BYTES = 1 << 18


class ChannelClosed(EOFError):
    """The other end is gone (its process ended), or the stream broke."""


class Channel:
    """One end of the socket pair (see the module)."""

    def __init__(self, sock: socket.socket, doorbell: Doorbell | None = None) -> None:
        self.sock = sock
        self._doorbell = doorbell
        self._inbox = bytearray()
        self._outbox = bytearray()
        self._buffer = bytearray(_READ_BYTES)
        self._sending = threading.Lock()

    def fileno(self) -> int:
        return self.sock.fileno()

    # -- sending ------------------------------------------------------------------------

    def send(self, message: object) -> None:
        """Queue ``message`` and send what the socket takes now (all of it, when the
        socket blocks)."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._sending:
            self._outbox += _LENGTH.pack(len(data))
            self._outbox += data
            self._flush()

    def flush(self) -> bool:
        """Send what is queued, as far as the socket takes it; True when nothing is left."""
        with self._sending:
            return self._flush()

    @property
    def pending_bytes(self) -> int:
        return len(self._outbox)

    def _flush(self) -> bool:
        while self._outbox:
            try:
                sent = self.sock.send(self._outbox)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError as exc:
                raise ChannelClosed(f"the socket broke: {exc}") from None
            del self._outbox[:sent]
            if self._doorbell is not None and sent:
                self._doorbell.ring()  # a piece at a time: a long message never waits
        return True

    # -- receiving ----------------------------------------------------------------------

    def readable(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for bytes (or the end) to arrive."""
        ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
        return bool(ready)

    def receive(self) -> list[object]:
        """The messages that arrived whole; raises :class:`ChannelClosed` at the end of
        the stream (those that arrived before it are returned first)."""
        closed = False
        while True:
            try:
                got = self.sock.recv_into(self._buffer)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                raise ChannelClosed(f"the socket broke: {exc}") from None
            if not got:
                closed = True
                break
            self._inbox += memoryview(self._buffer)[:got]
            if self.sock.getblocking() and got < _READ_BYTES:
                break  # a blocking socket would wait here for more
        messages = self._frames()
        if closed and not messages:
            raise ChannelClosed("the other end closed the socket")
        return messages

    def _frames(self) -> list[object]:
        out, inbox, at = [], self._inbox, 0
        while len(inbox) - at >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(inbox, at)
            if length > MAX_FRAME_BYTES:
                raise ChannelClosed(f"a frame of {length} bytes: the stream is broken")
            end = at + _LENGTH.size + length
            if len(inbox) < end:
                break
            out.append(pickle.loads(memoryview(inbox)[at + _LENGTH.size : end]))
            at = end
        del inbox[:at]
        return out

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
