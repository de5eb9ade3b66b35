"""A local directory in vLLM's filesystem-tier layout, written the way vLLM writes.

A write goes to ``<dest>_<random>.tmp`` opened with ``O_CREAT|O_EXCL``, is checked for a
short write, and is then moved into place, so a reader never sees a half-written file.
Create-only writes publish with ``link`` (fails if the destination appeared meanwhile);
vLLM itself uses ``os.replace``, which is equivalent for content-addressed blocks.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from s3kv.errors import InvalidKeyError, SizeMismatchError, StoreError
from s3kv.integrity import Buffer
from s3kv.stores.base import ObjectInfo, PutOptions, Staged, Store
from s3kv.stores.errors import from_os_error
from s3kv.stores.hooks import reported

TMP_SUFFIX = ".tmp"
_TOKEN = re.compile(r"[0-9A-Za-z-]{1,64}")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\]")
"""Control characters and backslashes: no key holds them as a path under the root."""
_CREATE_FLAGS = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PASSED_KEPT = 1000
"""Entries a listing passed over that a store keeps to report (the first ones met)."""


class LocalStore(Store):
    """Files under ``root``; keys are ``/``-separated paths relative to it."""

    is_local = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self.name = str(self.root)
        self._passed: dict[str, str] = {}
        self._passed_lock = threading.Lock()

    def passed_over(self) -> dict[str, str]:
        """What listings met and did not list: entries that are neither regular files nor
        folders (a symlink, to a file or a folder; a FIFO, a socket, a device), ``{key:
        what it is}``. None is read or followed: a symlink inside the root could name
        anything on the machine. Callers that copy or check a directory report these,
        so nothing is left out unsaid."""
        with self._passed_lock:
            return dict(self._passed)

    def path_for(self, key: str) -> Path:
        """The file of a key; refuses any key that could leave the root."""
        parts = key.split("/")  # an empty key, or a leading "/", gives an empty part
        if _UNSAFE.search(key) or "" in parts or "." in parts or ".." in parts:
            raise InvalidKeyError(
                f"key {key!r} cannot be a path under {self.root} (absolute, '..', '.', empty "
                "segments or control characters)"
            )
        return self.root / key

    # -- reads ------------------------------------------------------------------------

    @reported
    def get(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
        path = self.path_for(key)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if max_bytes is not None and st.st_size > max_bytes:
                    raise SizeMismatchError(
                        f"read {path}: file is {st.st_size} bytes, more than the {max_bytes} "
                        "expected (a foreign or damaged file under a block name); not read"
                    )
                data = f.read(-1 if max_bytes is None else max_bytes + 1)
        except OSError as exc:
            raise from_os_error(exc, "read", str(path)) from exc
        return data, _info(key, len(data), st.st_mtime)

    @reported
    def get_into(self, key: str, buffer: memoryview) -> ObjectInfo:
        path = self.path_for(key)
        try:
            with open(path, "rb", buffering=0) as f:
                st = os.fstat(f.fileno())
                if st.st_size != len(buffer):
                    raise SizeMismatchError(
                        f"read {path}: file is {st.st_size} bytes, expected {len(buffer)}"
                    )
                pos = 0
                while pos < len(buffer):
                    got = f.readinto(buffer[pos:])
                    if not got:
                        raise SizeMismatchError(f"read {path}: file shrank while being read")
                    pos += got
        except OSError as exc:
            raise from_os_error(exc, "read", str(path)) from exc
        return _info(key, st.st_size, st.st_mtime)

    @reported
    def get_range(self, key: str, *, start: int, end: int | None = None) -> bytes:
        path = self.path_for(key)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read() if end is None else f.read(max(0, end - start))
        except OSError as exc:
            raise from_os_error(exc, "read", str(path)) from exc

    @reported
    def head(self, key: str) -> ObjectInfo | None:
        path = self.path_for(key)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise from_os_error(exc, "stat", str(path)) from exc
        return _info(key, st.st_size, st.st_mtime)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        folder, _, _ = prefix.rpartition("/")
        base = self.root.joinpath(*folder.split("/")) if folder else self.root
        yield from self._walk(base, f"{folder}/" if folder else "", prefix, start_after or "")

    def _walk(self, directory: Path, rel: str, prefix: str, after: str) -> Iterator[ObjectInfo]:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise from_os_error(exc, "list", str(directory)) from exc
        for entry in entries:
            key = rel + entry.name
            if entry.is_dir(follow_symlinks=False):
                sub = key + "/"
                if sub.startswith(prefix) or prefix.startswith(sub):
                    yield from self._walk(Path(entry.path), sub, prefix, after)
            elif entry.is_file(follow_symlinks=False):
                if key.startswith(prefix) and key > after:
                    st = entry.stat(follow_symlinks=False)
                    yield _info(key, st.st_size, st.st_mtime)
            elif (key.startswith(prefix) or prefix.startswith(key + "/")) and key > after:
                self._pass_over(key, entry)

    def _pass_over(self, key: str, entry: os.DirEntry[str]) -> None:
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            return  # gone meanwhile
        if stat.S_ISLNK(mode):
            what = "a symbolic link"
        elif stat.S_ISFIFO(mode):
            what = "a FIFO"
        elif stat.S_ISSOCK(mode):
            what = "a socket"
        else:
            what = "a device or other special file"
        with self._passed_lock:
            if len(self._passed) < _PASSED_KEPT:
                self._passed[key] = what

    # -- writes -----------------------------------------------------------------------

    @reported
    def put(self, key: str, data: Buffer, options: PutOptions) -> bool:
        path = self.path_for(key)
        *folders, name = key.split("/")
        view = memoryview(data).cast("B")
        try:
            parent = self._open_folders(folders)
        except OSError as exc:
            raise from_os_error(exc, "write", str(path)) from exc
        tmp = f"{name}_{secrets.token_hex(8)}{TMP_SUFFIX}"
        try:
            if options.create_only and _exists(name, parent, str(path)):
                return False
            fd = os.open(tmp, _CREATE_FLAGS, 0o644, dir_fd=parent)
            try:
                written = 0
                while written < len(view):
                    written += os.write(fd, view[written:])
            finally:
                os.close(fd)
            if written != len(view):
                raise StoreError(f"write {path}: short write ({written} of {len(view)} bytes)")
            return self._publish(tmp, name, parent, options.create_only, str(path))
        except OSError as exc:
            raise from_os_error(exc, "write", str(path)) from exc
        finally:
            _discard(tmp, parent)  # never raises: the cause above is what the caller sees
            os.close(parent)

    def stage(self, key: str) -> Staged:
        """A temp file for ``key`` that a native writer fills by path, then published.

        Its folder is opened as :meth:`put` opens it (``O_NOFOLLOW`` from the root), and
        ``path`` names the temp file through that descriptor
        (``/proc/self/fd/<folder>/<tmp>``): whoever opens it resolves no folder again, so
        a symlink swapped in meanwhile is never followed. ``close()`` removes the temp
        file unless ``publish`` moved it into place.
        """
        path = str(self.path_for(key))
        *folders, name = key.split("/")
        try:
            parent = self._open_folders(folders)
        except OSError as exc:
            raise from_os_error(exc, "write", path) from exc
        tmp = f"{name}_{secrets.token_hex(8)}{TMP_SUFFIX}"

        def publish(create_only: bool) -> bool:
            try:
                return self._publish(tmp, name, parent, create_only, path)
            except OSError as exc:
                raise from_os_error(exc, "write", path) from exc

        def close() -> None:
            _discard(tmp, parent)
            os.close(parent)

        try:
            os.close(os.open(tmp, _CREATE_FLAGS, 0o644, dir_fd=parent))  # ours, not another's
            return Staged(f"/proc/self/fd/{parent}/{tmp}", path, publish, close)
        except BaseException as exc:  # an error, or Ctrl-C: no temp file is left behind
            close()
            if isinstance(exc, OSError):
                raise from_os_error(exc, "write", path) from exc
            raise

    @contextmanager
    def opened(self, key: str) -> Iterator[tuple[str, int]]:
        """``key``'s file held open (never through a symlink) for a native reader:
        (``/proc/self/fd/<fd>``, its size)."""
        path = self.path_for(key)
        *folders, name = key.split("/")
        try:
            parent = self._open_folders(folders)
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            finally:
                os.close(parent)
        except OSError as exc:
            raise from_os_error(exc, "read", str(path)) from exc
        try:
            yield f"/proc/self/fd/{fd}", os.fstat(fd).st_size
        finally:
            os.close(fd)

    def _open_folders(self, folders: Sequence[str]) -> int:
        """A descriptor of the key's folder, made where missing, under the root's real path.

        Each folder is opened with ``O_NOFOLLOW`` from its parent's descriptor: a symlink
        planted inside the root (or swapped in meanwhile) is refused, never followed, so
        no write lands outside the root. The root itself may be a symlink (the caller
        named it).
        """
        try:
            fd = os.open(self.root, _FOLDER_FLAGS & ~os.O_NOFOLLOW)
        except FileNotFoundError:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root, _FOLDER_FLAGS & ~os.O_NOFOLLOW)
        try:
            for folder in folders:
                child = _open_folder(folder, fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def _publish(tmp: str, name: str, parent: int, create_only: bool, path: str) -> bool:
        here = {"src_dir_fd": parent, "dst_dir_fd": parent}
        if not create_only:
            os.replace(tmp, name, **here)
            return True
        try:
            os.link(tmp, name, follow_symlinks=False, **here)
        except FileExistsError:
            if not _exists(name, parent, path):  # gone meanwhile: publish it now
                os.link(tmp, name, follow_symlinks=False, **here)
                return True
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                raise
            os.replace(tmp, name, **here)  # no hard links here: do as vLLM does
        return True

    def delete_many(self, keys: Sequence[str]) -> dict[str, str]:
        failed: dict[str, str] = {}
        for key in keys:
            try:
                os.unlink(self.path_for(key))
            except FileNotFoundError:
                pass
            except OSError as exc:
                failed[key] = exc.strerror or str(exc)
        return failed

    @reported
    def renew(
        self, key: str, *, unmodified_since: datetime, metadata: Mapping[str, str]
    ) -> datetime | None:
        """A file's Last-Modified is its mtime: set it to now (the bytes are not touched),
        unless the file was written again since ``unmodified_since`` (to the second)."""
        path = self.path_for(key)
        try:
            if int(os.stat(path, follow_symlinks=False).st_mtime) > unmodified_since.timestamp():
                return None
            os.utime(path, follow_symlinks=False)
            mtime = os.stat(path, follow_symlinks=False).st_mtime
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise from_os_error(exc, "touch", str(path)) from exc
        return datetime.fromtimestamp(mtime, timezone.utc)

    def delete_if_unchanged(
        self, items: Sequence[tuple[str, str | None]]
    ) -> tuple[dict[str, str], set[str]]:
        """Files carry no ETag; ``unlink`` itself says whether the file was still there."""
        failed: dict[str, str] = {}
        gone: set[str] = set()
        for key, _ in items:
            try:
                os.unlink(self.path_for(key))
            except FileNotFoundError:
                gone.add(key)
            except OSError as exc:
                failed[key] = exc.strerror or str(exc)
        return failed, gone


def temp_target(key: str) -> str | None:
    """The key a temp file will become once published (``<key>_<token>.tmp``, as s3kv
    and vLLM's filesystem tier name them); None when ``key`` is no such temp file."""
    if not key.endswith(TMP_SUFFIX):
        return None
    target, sep, token = key[: -len(TMP_SUFFIX)].rpartition("_")
    if not sep or not target or not _TOKEN.fullmatch(token):
        return None
    return target


def _open_folder(name: str, parent: int) -> int:
    """Open (making it if missing) folder ``name`` of ``parent``, never through a symlink."""
    for made in (False, True):
        try:
            return os.open(name, _FOLDER_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if made:
                raise
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(name, parent):
                exc.errno = errno.ELOOP  # name it as what it is
            raise
        try:
            os.mkdir(name, 0o777, dir_fd=parent)
        except FileExistsError:
            pass  # made meanwhile by another writer
    raise AssertionError("unreachable")


def _exists(name: str, parent: int, path: str) -> bool:
    """Whether a file is already where ``name`` goes (a create-only write then leaves it).
    Anything else in its place (a folder, a symlink, a FIFO) is no file: refused, never
    counted as the file being there, nor written through."""
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISREG(mode):
        return True
    what = (
        "a folder" if stat.S_ISDIR(mode)
        else "a symbolic link" if stat.S_ISLNK(mode)
        else "a FIFO, socket or device"
    )
    raise StoreError(f"write {path}: {what} is in the way of the file; move it aside")


def _is_symlink(name: str, parent: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _discard(tmp: str, parent: int) -> None:
    """Remove a temp file if it is still there; a failure here never hides the cause."""
    try:
        os.unlink(tmp, dir_fd=parent)
    except OSError:
        pass


def _info(key: str, size: int, mtime: float) -> ObjectInfo:
    return ObjectInfo(key=key, size=size, last_modified=datetime.fromtimestamp(mtime, timezone.utc))
