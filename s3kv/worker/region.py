"""The primary tier's rows, shared: found in EngineCore's process, mapped in the worker's.

vLLM's CPU tier (``SharedOffloadRegion``) is one ``MAP_SHARED`` file in /dev/shm (or a
few, back to back) that every vLLM process maps; the tier is handed a view of it. Bytes
another process writes into that file's pages are the bytes vLLM copies to the GPU. So
:func:`plan_region` finds, from the view's address and ``/proc/self/maps``, which file
pages back it and a descriptor of each file this process already holds (through
``/proc/self/fd``: it works after the file is unlinked), and :func:`map_region` maps the
same pages in the worker, checking each descriptor is the file it was meant to be
(device and inode) and that the files hold the whole view. No path is handed over.

A view that is not backed so (an anonymous mapping, a numpy array, a mapping whose file
this process holds no descriptor of and cannot open) cannot be shared:
:class:`RegionUnshareable` says why, and the tier runs its data path in-process.
"""

from __future__ import annotations

import bisect
import ctypes
import fcntl
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

from s3kv.errors import S3KVError

MAPS = "/proc/self/maps"


class RegionUnshareable(S3KVError):
    """The rows cannot be mapped by another process (the reason says why)."""


@dataclass(frozen=True, slots=True)
class Piece:
    """Part of the view backed by one file: ``length`` bytes at ``file_offset`` of the
    file open as ``fd``, which are the view's bytes from ``view_offset``."""

    fd: int
    file_offset: int
    length: int
    view_offset: int
    device: int
    inode: int


@dataclass(frozen=True, slots=True)
class RegionPlan:
    """How to map the view elsewhere; ``fds`` are to be passed to the worker
    (``owned``: opened by :func:`plan_region`, closed by :meth:`close`)."""

    pieces: tuple[Piece, ...]
    nbytes: int
    row_bytes: int
    owned: tuple[int, ...] = ()

    @property
    def fds(self) -> tuple[int, ...]:
        return tuple(sorted({p.fd for p in self.pieces}))

    def close(self) -> None:
        for fd in self.owned:
            try:
                os.close(fd)
            except OSError:
                pass


@dataclass(frozen=True, slots=True)
class _Mapping:
    start: int
    end: int
    shared: bool
    offset: int
    device: int
    inode: int
    path: str


def _mappings() -> Iterator[_Mapping]:
    with open(MAPS, encoding="utf-8", errors="replace") as maps:
        for line in maps:
            fields = line.rstrip("\n").split(maxsplit=5)
            if len(fields) < 5:
                continue
            span, perms, offset, dev, inode = fields[:5]
            start, end = (int(x, 16) for x in span.split("-"))
            major, minor = (int(x, 16) for x in dev.split(":"))
            yield _Mapping(start, end, perms[3:4] == "s", int(offset, 16),
                           os.makedev(major, minor), int(inode),
                           fields[5] if len(fields) > 5 else "")  # fmt: skip


def _address(view: memoryview) -> int:
    if view.readonly:
        raise RegionUnshareable("the rows are read-only")
    if not view.contiguous:
        raise RegionUnshareable("the rows are not one contiguous buffer")
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def _descriptor(mapping: _Mapping, opened: list[int]) -> int:
    """A read-write descriptor of the mapping's file this process holds, else one
    opened by its path (when the file is still there and is the same file)."""
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            st = os.stat(f"/proc/self/fd/{fd}")
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except (OSError, ValueError):
            continue
        if (st.st_dev, st.st_ino) == (mapping.device, mapping.inode) and (
            flags & os.O_ACCMODE
        ) == os.O_RDWR:
            return fd
    path = mapping.path
    if path.startswith("/") and not path.endswith(" (deleted)"):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise RegionUnshareable(f"{path} backs the rows but cannot be opened: {exc}") from None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) == (mapping.device, mapping.inode):
            opened.append(fd)
            return fd
        os.close(fd)
    what = path or "an anonymous mapping"
    raise RegionUnshareable(
        f"the rows are mapped from {what}, of which this process holds no descriptor"
    )


def plan_region(view: memoryview, row_bytes: int) -> RegionPlan:
    """How another process maps the bytes of ``view`` (rows of ``row_bytes``)."""
    base = _address(view)
    nbytes = view.nbytes
    if row_bytes <= 0 or nbytes < row_bytes:
        raise RegionUnshareable(f"a view of {nbytes} bytes holds no row of {row_bytes}")
    end = base + nbytes
    pieces: list[Piece] = []
    opened: list[int] = []
    try:
        at = base
        for m in _mappings():
            if m.end <= at or m.start > at:
                continue
            if not m.shared or m.inode == 0:
                raise RegionUnshareable("the rows are not a shared mapping of a file")
            upto = min(m.end, end)
            view_offset = at - base
            if view_offset % row_bytes and (not pieces or pieces[-1].inode != m.inode):
                raise RegionUnshareable("a row of the view spans two files")
            fd = _descriptor(m, opened)
            file_offset = m.offset + (at - m.start)
            last = pieces[-1] if pieces else None
            if (last is not None and last.fd == fd
                    and last.file_offset + last.length == file_offset):  # fmt: skip
                pieces[-1] = Piece(fd, last.file_offset, last.length + upto - at,
                                   last.view_offset, last.device, last.inode)  # fmt: skip
            else:
                pieces.append(Piece(fd, file_offset, upto - at, view_offset, m.device, m.inode))
            at = upto
            if at >= end:
                break
        if at < end:
            raise RegionUnshareable("the rows are not all in mapped files")
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    return RegionPlan(tuple(pieces), nbytes, row_bytes, tuple(opened))


class Rows:
    """A row per chunk id: writable views of the primary tier's bytes."""

    def __init__(self, pieces: list[tuple[int, memoryview]], row_bytes: int, nbytes: int,
                 maps: list[mmap.mmap] | None = None) -> None:  # fmt: skip
        self._starts = [start for start, _ in pieces]
        self._views = [view for _, view in pieces]
        self.row_bytes = row_bytes
        self.count = nbytes // row_bytes
        self._maps = maps or []

    @classmethod
    def of_view(cls, view: memoryview, row_bytes: int) -> Rows:
        """The rows of a view in this process (the in-process data path)."""
        flat = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        return cls([(0, flat)], row_bytes, flat.nbytes)

    def row(self, chunk: int) -> memoryview:
        bs = self.row_bytes
        if chunk < 0 or chunk >= self.count:
            raise IndexError(f"chunk id {chunk} is outside the primary tier's {self.count} rows")
        at = chunk * bs
        i = bisect.bisect_right(self._starts, at) - 1
        local = at - self._starts[i]
        view = self._views[i]
        if local + bs > len(view):
            raise IndexError(f"chunk id {chunk} spans two files of the primary tier")
        return view[local : local + bs]

    def release(self) -> None:
        """Let the bytes go (vLLM unmaps the region after its tiers shut down: a view
        left here would keep it mapped). Views of rows must have been dropped first."""
        for view in self._views:
            view.release()
        self._views = []
        for m in self._maps:
            m.close()
        self._maps = []


def map_region(plan: RegionPlan) -> Rows:
    """Map what ``plan`` names (in the worker, whose descriptors it holds)."""
    pieces: list[tuple[int, memoryview]] = []
    maps: list[mmap.mmap] = []
    for p in plan.pieces:
        st = os.fstat(p.fd)
        if (st.st_dev, st.st_ino) != (p.device, p.inode):
            raise RegionUnshareable(f"descriptor {p.fd} is not the file that backs the rows")
        if st.st_size < p.file_offset + p.length:
            raise RegionUnshareable(
                f"the rows' file holds {st.st_size} bytes, fewer than the view's "
                f"{p.file_offset + p.length}"
            )
        skip = p.file_offset % mmap.ALLOCATIONGRANULARITY
        m = mmap.mmap(p.fd, p.length + skip, flags=mmap.MAP_SHARED,
                      prot=mmap.PROT_READ | mmap.PROT_WRITE,
                      offset=p.file_offset - skip)  # fmt: skip
        maps.append(m)
        pieces.append((p.view_offset, memoryview(m)[skip : skip + p.length]))
    if sum(p.length for p in plan.pieces) != plan.nbytes:
        raise RegionUnshareable("the pieces do not add up to the view")
    return Rows(pieces, plan.row_bytes, plan.nbytes, maps)
