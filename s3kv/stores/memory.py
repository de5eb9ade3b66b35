"""Copies between awscrt's buffers and the caller's, without holding the GIL; a file's
pages mapped for reading.

awscrt hands a GET's body to Python once per part and reads a PUT's body from Python once
per part; the copy itself is a ``memmove`` through ctypes, which releases the GIL for its
duration, so a load of large blocks does not take the interpreter from the thread that
schedules vLLM's requests (vLLM runs its offloading tiers inside EngineCore).
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Iterator
from contextlib import contextmanager


def address_of(view: memoryview) -> int | None:
    """The address of a writable, C-contiguous buffer's first byte; None if it is
    read-only (such a source is copied by the interpreter instead)."""
    if view.readonly or not view.c_contiguous or not len(view):
        return None
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def copy_to(address: int, data: bytes) -> None:
    """``data`` to the memory at ``address`` (its owner checked the bounds)."""
    ctypes.memmove(address, data, len(data))


def copy_from(target: memoryview, source: memoryview, source_address: int | None) -> None:
    """``source`` (at ``source_address`` when known) into ``target``, same length."""
    target_address = address_of(target)
    if target_address is None or source_address is None:
        target[:] = source
        return
    ctypes.memmove(target_address, source_address, len(source))


@contextmanager
def mapped(path: str, size: int) -> Iterator[memoryview]:
    """The first ``size`` bytes of the file at ``path``, mapped read-only (no copy). The
    file must hold at least that many; it is not to be truncated while mapped."""
    if size == 0:
        yield memoryview(b"")
        return
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as area:
        view = memoryview(area)
        try:
            yield view
        finally:
            view.release()
