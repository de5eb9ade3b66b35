"""Blocks between a directory and S3, their bytes moved by native code (``push``, ``pull``).

Where one end of a copy is a directory, the S3 client reads or writes the file itself
(awscrt: ``send_filepath``/``recv_filepath``, in C, as s3transfer's CRT manager and the AWS
CLI v2 do), and Python only decides: no block's bytes pass through the interpreter. Every
promise of the buffer path holds:

* **pull** (:class:`PullAttempt`, one block of a :class:`~s3kv.transfers.jobs.TransferJob`
  whose retries, deadline and cancel are every job's): the object is written into a temp
  file of the destination folder (:meth:`s3kv.stores.Store.stage`: opened without
  following symlinks, named through the folder's descriptor), at most its listed size (a
  larger object is refused from the answer's headers); its recorded checksum is computed
  over the file's mapped pages (without the GIL) and a mismatch reads it once more, into
  a new temp file; only then is the file published, create-only (``link``). A failure
  anywhere leaves no file. On awscrt the GET is submitted and its completion, on
  awscrt's thread, checks and publishes: no thread waits for a block.
* **push** (:class:`PushAttempt`, likewise a job of its own): the file is held open
  (never through a symlink), its checksum taken over its mapped pages, and the PUT is
  create-only with that checksum and a write token, its 412 settled as every write's
  (:func:`s3kv.transfers.writes.landed`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import ExitStack

import s3kv.integrity as integrity
from s3kv.errors import SizeMismatchError
from s3kv.integrity import Checksum
from s3kv.settings import S3Settings
from s3kv.stores import ObjectInfo, PutOptions, Store
from s3kv.stores.base import Cancel, Staged
from s3kv.stores.errors import from_os_error
from s3kv.stores.memory import mapped
from s3kv.transfers.jobs import BlockResult, Done, on_pool
from s3kv.transfers.transfer import BLOCK_TAGS
from s3kv.transfers.writes import landed, write_id


class PullAttempt:
    """One block from S3 into the directory ``dst``, an attempt of its own job: on a
    retry, a new temp file (bytes of a request stopped earlier never reach it)."""

    __slots__ = (
        "dst", "dst_key", "first", "key", "pool", "reread", "size", "src", "src_key",
        "staged", "usual", "where",
    )  # fmt: skip

    def __init__(self, src: Store, src_key: str, where: str, dst: Store, dst_key: str,
                 size: int, usual: Callable[[], int | None], pool: Executor) -> None:
        self.src, self.src_key, self.where, self.size = src, src_key, where, size
        self.dst, self.dst_key, self.usual, self.pool = dst, dst_key, usual, pool
        self.key = dst_key.encode()
        self.staged: Staged | None = None
        self.reread = False  # read once more after a checksum mismatch
        self.first: Checksum | None = None  # the mismatched read's checksum

    def start(self, done: Done) -> Cancel:
        self._close()
        self.staged = self.dst.stage(self.dst_key)
        return self._fetch(done, self.staged)

    def _fetch(self, done: Done, staged: Staged) -> Cancel:
        finished = done.guard(lambda info, error: self._fetched(done, staged, info, error))
        if self.src.submits_files:
            return self.src.submit_get_to_path(self.src_key, staged.path, self.size, finished)
        return on_pool(
            self.pool,
            lambda: self.src.get_to_path(self.src_key, staged.path, max_bytes=self.size),
            finished,
        )

    def _fetched(self, done: Done, staged: Staged, info: ObjectInfo | None,
                 error: BaseException | None) -> None:
        if error is not None or info is None:
            done(None, error)  # the job retries transient errors, then give_up()
            return
        if info.size != self.size:
            raise SizeMismatchError(f"{self.where}: listed as {self.size} bytes, read {info.size}")
        recorded = info.checksum
        try:
            if recorded is None:
                integrity.check_size(self.size, self.usual(), where=self.where)
            else:
                with mapped(staged.path, self.size) as view:
                    got = integrity.compute(recorded.algorithm, view)
                if got != recorded:
                    if self.reread:
                        raise integrity.mismatch(recorded, self.first, got, where=self.where)
                    # One mismatch may be damage on the way: read once more, afresh.
                    self.reread, self.first = True, got
                    self._close()
                    self.staged = self.dst.stage(self.dst_key)
                    done.cancel = self._fetch(done, self.staged)
                    return
        except OSError as exc:
            raise from_os_error(exc, "write", staged.final) from exc
        created = staged.publish(True)
        self._close()
        done(BlockResult(self.key, "done" if created else "already_present",
                         nbytes=self.size if created else 0,
                         verified=not (created and recorded is None)), None)

    def give_up(self, reason: str) -> BlockResult:
        self._close()
        return BlockResult(self.key, "failed", reason=reason)

    def _close(self) -> None:
        staged, self.staged = self.staged, None
        if staged is not None:
            staged.close()


class PushAttempt:
    """One block of the directory ``src`` to S3, an attempt of its own job: the file held
    open (never through a symlink) and mapped from the first attempt to the block's end,
    so every retry sends the bytes its checksum and write token were taken from."""

    __slots__ = (
        "dst", "dst_key", "held", "key", "options", "path", "pool", "settings", "size",
        "src", "src_key", "usual", "view", "where",
    )  # fmt: skip

    def __init__(self, src: Store, src_key: str, where: str, dst: Store, dst_key: str,
                 size: int, usual: Callable[[], int | None], settings: S3Settings,
                 pool: Executor) -> None:
        self.src, self.src_key, self.where, self.size = src, src_key, where, size
        self.dst, self.dst_key, self.usual, self.pool = dst, dst_key, usual, pool
        self.settings = settings
        self.key = src_key.encode()
        self.held: ExitStack | None = None
        self.path, self.view = "", memoryview(b"")
        self.options = PutOptions()

    def start(self, done: Done) -> Cancel:
        if self.held is None:
            self._hold()
        finished = done.guard(lambda created, error: self._put(done, created, error))
        if self.dst.can_submit(self.size):
            return self.dst.submit_put(self.dst_key, self.view, self.options, finished,
                                       path=self.path)
        return on_pool(
            self.pool,
            lambda: self.dst.put_from_path(self.dst_key, self.path, self.size, self.options),
            finished,
        )

    def _hold(self) -> None:
        held = ExitStack()
        try:
            self.path, actual = held.enter_context(self.src.opened(self.src_key))
            if actual != self.size:
                raise SizeMismatchError(f"{self.where}: listed as {self.size} bytes, now {actual}")
            integrity.check_size(actual, self.usual(), where=self.where)
            self.view = held.enter_context(mapped(self.path, self.size))
            self.options = PutOptions(
                create_only=True, checksum=integrity.compute(self.settings.checksum, self.view),
                tags=BLOCK_TAGS, write_id=write_id(),
            )
        except BaseException:
            held.close()
            raise
        self.held = held

    def _put(self, done: Done, created: bool | None, error: BaseException | None) -> None:
        if error is not None:
            done(None, error)  # the job retries transient errors, then give_up()
        elif created:
            done(self._result(True), None)
        else:
            # 412: a HEAD tells whose object it is (writes.landed), on the pool (a
            # blocking request on a transport's thread could stall its loop).
            on_pool(self.pool, lambda: self._result(self._landed()), done)

    def _landed(self) -> bool:
        return landed(self.dst, self.dst_key, self.options, self.size)

    def _result(self, created: bool) -> BlockResult:
        self._close()
        return BlockResult(self.key, "done" if created else "already_present",
                           nbytes=self.size if created else 0)

    def give_up(self, reason: str) -> BlockResult:
        self._close()
        return BlockResult(self.key, "failed", reason=reason)

    def _close(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            self.view = memoryview(b"")
            held.close()
