"""Blocks between a directory and S3, their bytes moved by native code (``push``, ``pull``).

Where one end of a copy is a directory, the S3 client reads or writes the file itself
(awscrt: ``send_filepath``/``recv_filepath``, in C, as s3transfer's CRT manager and the AWS
CLI v2 do), and Python only decides: no block's bytes pass through the interpreter. Every
promise of the buffer path holds:

* **pull**: the object is written into a temp file of the destination folder
  (:meth:`s3kv.stores.Store.staged`: opened without following symlinks, named through
  the folder's descriptor), at most its listed size (a larger object is refused from the
  answer's headers); its recorded checksum is computed over the file's mapped pages
  (without the GIL) and a mismatch reads it once more; only then is the file published,
  create-only (``link``). A failure anywhere leaves no file.
* **push**: the file is held open (never through a symlink), its checksum taken over its
  mapped pages, and the PUT is create-only with that checksum and a write token, its 412
  settled as every write's (:func:`s3kv.transfers.writes.put_create_only`).
"""

from __future__ import annotations

import s3kv.integrity as integrity
from s3kv.errors import SizeMismatchError
from s3kv.integrity import Checksum
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import ObjectInfo, PutOptions, Store
from s3kv.stores.memory import mapped
from s3kv.transfers.transfer import BLOCK_TAGS
from s3kv.transfers.writes import put_create_only, write_id


def pull_block(
    src: Store, src_key: str, where: str, dst: Store, dst_key: str, size: int,
    usual: int | None, settings: S3Settings,
) -> tuple[bool, int, bool]:
    """Copy one block from S3 into the directory ``dst``; (created, bytes, unverified)."""
    with dst.staged(dst_key) as staged:

        def fetch() -> ObjectInfo:
            info = with_retries(
                lambda: src.get_to_path(src_key, staged.path, max_bytes=size), settings
            )
            if info.size != size:
                raise SizeMismatchError(f"{where}: listed as {size} bytes, read {info.size}")
            return info

        def checksum(algorithm: str) -> Checksum | None:
            with mapped(staged.path, size) as view:
                return integrity.compute(algorithm, view)

        recorded = fetch().checksum
        if recorded is not None:

            def again() -> Checksum | None:
                fetch()
                return checksum(recorded.algorithm)

            integrity.settle(recorded, checksum(recorded.algorithm), again, where=where)
        else:
            integrity.check_size(size, usual, where=where)
        created = staged.publish(True)
    return created, size if created else 0, created and recorded is None


def push_block(
    src: Store, src_key: str, where: str, dst: Store, dst_key: str, size: int,
    usual: int | None, settings: S3Settings,
) -> tuple[bool, int, bool]:
    """Copy one block of the directory ``src`` to S3; (created, bytes, unverified)."""
    with src.opened(src_key) as (path, actual):
        if actual != size:
            raise SizeMismatchError(f"{where}: listed as {size} bytes, now {actual}")
        integrity.check_size(actual, usual, where=where)
        with mapped(path, size) as view:
            options = PutOptions(
                create_only=True, checksum=integrity.compute(settings.checksum, view),
                tags=BLOCK_TAGS, write_id=write_id(),
            )
            created = put_create_only(dst, dst_key, view, options, settings, path=path)
    return created, size if created else 0, False
