"""One block's GET on the direct data path (:mod:`.direct`): its ranged parts, read by
the kernel into the caller's buffer, and the one answer they make together.

A part's answer must be S3's (an ETag, no web page) and of the block's size
(``Content-Length``, or ``Content-Range`` for a part), checked from the headers before
any byte of the body is read: an oversized object under a block key is never read.
Every part of a block must carry one ETag, else the object changed while it was read
and the block is read again. When a part fails, the block's other parts are stopped;
``done`` runs once, after every part left the buffer.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from s3kv.errors import SizeMismatchError, StoreError, TransferCancelledError
from s3kv.errors import TransientStoreError as Transient
from s3kv.stores.base import ObjectInfo
from s3kv.stores.crt_request import Answer, translate_status
from s3kv.stores.direct import MIN_PART_BYTES, GetDone
from s3kv.stores.wire import (
    Link,
    content_length,
    keep_alive,
    mapped,
    read_head,
    read_small_body,
    signed_request,
)

if TYPE_CHECKING:
    from s3kv.stores.direct import Direct


class GetBlock:
    """One block's parts: the links lent to them (for cancel), their answers, one done."""

    def __init__(self, key: str, where: str, buffer: memoryview, done: GetDone) -> None:
        self.key, self.where, self.buffer, self._done = key, where, buffer, done
        self.cancelled = False
        self._lock = threading.Lock()
        self._left = 0
        self._links: set[Link] = set()
        self._infos: list[ObjectInfo] = []
        self._error: BaseException | None = None

    def parts(self, wanted: int) -> list[GetPart]:
        size = len(self.buffer)
        count = max(1, min(wanted, size // MIN_PART_BYTES))
        if count == 1:
            parts = [GetPart(self, 0, size, ranged=False)]
        else:
            step = -(-size // count)
            parts = [GetPart(self, i, min(size, i + step), ranged=True)
                     for i in range(0, size, step)]
        self._left = len(parts)
        return parts

    def mismatch(self, size: int) -> SizeMismatchError:
        return SizeMismatchError(
            f"GET {self.where}: object is {size} bytes, expected {len(self.buffer)} "
            "(a truncated or foreign object, or a buffer of the wrong size)"
        )

    def watch(self, link: Link) -> None:
        with self._lock:
            self._links.add(link)
            cancelled = self.cancelled
        if cancelled:
            link.shutdown()

    def unwatch(self, link: Link) -> None:
        with self._lock:
            self._links.discard(link)

    def cancel(self) -> None:
        self._stop(None)

    def _stop(self, error: BaseException | None) -> None:
        with self._lock:
            if error is not None and self._error is None:
                self._error = error
            if self.cancelled:
                return
            self.cancelled = True
            links = list(self._links)
        for link in links:
            link.shutdown()  # its thread's read ends at once; the part reports, then done

    def part_done(self, info: ObjectInfo) -> None:
        with self._lock:
            self._infos.append(info)
        self._settle()

    def part_failed(self, error: BaseException) -> None:
        if not isinstance(error, TransferCancelledError):
            self._stop(error)  # the first real failure is the block's; the rest stop
        self._settle()

    def _settle(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left:
                return
            error, infos, cancelled = self._error, self._infos, self.cancelled
        if error is None and cancelled:
            error = TransferCancelledError(f"GET {self.where}: cancelled")
        if error is None and len({i.etag for i in infos}) > 1:
            error = Transient(f"GET {self.where}: the object changed while its parts were read")
        self._done(None if error is not None else infos[0], error)


class GetPart:
    """Bytes ``[start, end)`` of a block: one request, one connection."""

    __slots__ = ("block", "end", "ranged", "start")

    def __init__(self, block: GetBlock, start: int, end: int, *, ranged: bool) -> None:
        self.block, self.start, self.end, self.ranged = block, start, end, ranged

    def run(self, direct: Direct) -> None:
        block = self.block
        try:
            if block.cancelled:
                raise TransferCancelledError(f"GET {block.where}: cancelled")
            info = direct.exchange(
                block, f"GET {block.where}", lambda link: self._get(link, direct)
            )
        except BaseException as exc:  # reported, never lost: the block must finish
            url = direct.endpoint.url
            block.part_failed(mapped(exc, "GET", block.where, url, direct.settings))
        else:
            block.part_done(info)

    def _get(self, link: Link, direct: Direct) -> tuple[ObjectInfo, bool]:
        block, url = self.block, direct.endpoint.url
        headers = {"Range": f"bytes={self.start}-{self.end - 1}"} if self.ranged else {}
        link.send(signed_request("GET", direct.endpoint, block.key, direct.credentials, headers))
        status, answer_headers, rest = read_head(link)
        if status >= 300:
            body = read_small_body(link, answer_headers, rest)
            raise translate_status(status, body, answer_headers, "GET", block.where)
        answer = Answer(block.key)
        answer.read(status, answer_headers)
        problem = answer.foreign(block.where, url)
        if problem is not None:
            raise problem
        length = content_length(answer_headers)
        if self.ranged:
            if status != 206:
                raise StoreError(
                    f"GET {block.where}: {url} answered {status} to a ranged GET (it "
                    "ignores Range); such a store needs whole-block reads"
                )
            if answer.size != len(block.buffer):
                raise block.mismatch(answer.size)
            if length != self.end - self.start:
                raise StoreError(f"GET {block.where}: a ranged part of the wrong length")
        elif length != len(block.buffer):
            raise block.mismatch(length)  # nothing of it read: the connection is dropped
        self._read_body(link, block.buffer[self.start : self.end], rest)
        return answer.info(), keep_alive(answer_headers)

    def _read_body(self, link: Link, view: memoryview, rest: bytes) -> None:
        total = len(view)
        pos = min(len(rest), total)
        view[:pos] = rest[:pos]
        while pos < total:
            got = link.read_into(view[pos:])
            if not got:
                if self.block.cancelled:
                    raise TransferCancelledError(f"GET {self.block.where}: cancelled")
                raise Transient(
                    f"GET {self.block.where}: connection closed after {pos} of {total} bytes"
                )
            pos += got
