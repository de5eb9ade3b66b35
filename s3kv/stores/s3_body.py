"""A botocore body read straight into the caller's buffer, within a deadline.

botocore bounds each read by the read timeout, not a body that trickles in: a
:class:`BodyWatch` handed to the store's watchdog shuts the socket down past the
request's deadline, which ends the read.
"""

from __future__ import annotations

import http.client
import socket
from typing import Any

from s3kv.stores.rules import cut_short


class BodyWatch:
    """A botocore body being read; expired, its socket is shut down, which ends the read."""

    __slots__ = ("deadline", "expired", "last", "sock")

    def __init__(self, body: Any, deadline: float) -> None:
        fp = getattr(getattr(body, "_raw_stream", None), "_fp", None)
        raw = getattr(getattr(fp, "fp", None), "raw", None)
        self.sock: socket.socket | None = getattr(raw, "_sock", None)
        self.deadline = self.last = deadline  # silence is the read timeout's (botocore)
        self.expired = False

    def expire(self) -> None:
        self.expired = True
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def read_into(body: Any, buffer: memoryview, where: str) -> None:
    """Fill ``buffer`` from a botocore body with no intermediate copy."""
    raw = body._raw_stream
    fp = getattr(raw, "_fp", None)
    # urllib3's readinto reads into a temporary bytes object and copies; the
    # http.client response beneath it reads from the socket into our buffer.
    reader = fp if isinstance(fp, http.client.HTTPResponse) else raw
    total = len(buffer)
    pos = 0
    try:
        while pos < total:
            got = reader.readinto(buffer[pos:])
            if not got:
                raise cut_short("GET", where, pos, total)
            pos += got
    except BaseException:
        raw.close()  # the connection is mid-body: never reuse it
        raise
    if reader is fp:
        raw.release_conn()
