"""Telling a damaged block from a good one, and replacing or removing one safely.

A block *fails its check* when it is empty, when its size is not its namespace and
rank's usual size (the CPU row stride), when its bytes do not match the checksum
recorded with it, or, when it records none (a directory, vLLM's object-store tier),
when it differs from a good copy whose checksum was verified. ``repair`` and ``push``/
``pull``/``cp --checksum`` act only on blocks that fail it, and only after re-checking
right before acting that the object is still the one judged:

* S3: a HEAD right before compares the ETag, and the replacing PUT carries
  ``If-Match: <the ETag judged>`` (AWS S3 documents it; moto and Ceph RGW 16 honour it,
  tested), so a block a writer replaced meanwhile is left alone. A delete carries
  ``If-Match`` too (moto honours it), but Ceph RGW 16 ignores it on DELETE: there the
  guard is the HEAD, and a writer that replaces the block within that window (one
  request) loses its block: a cache miss, never damage.
* A directory has no ETag: the bytes are read again right before acting, then the
  good copy goes in through a temp file and a rename (a reader never sees half a
  block). A writer that puts the same key within the window has its copy replaced by
  the verified good one, or (removal) deleted: again a miss at worst.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import s3kv.integrity as integrity
from s3kv.errors import (
    ChecksumMismatchError,
    IntegrityError,
    ObjectNotFoundError,
    TransientStoreError,
)
from s3kv.integrity import Checksum
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import ObjectInfo, PutOptions, Store
from s3kv.transfers.transfer import BLOCK_TAGS


@dataclass(frozen=True, slots=True)
class Judged:
    """A block as read, and why it fails its check (empty when it passes)."""

    key: str
    data: bytes
    info: ObjectInfo
    problem: str

    @property
    def damaged(self) -> bool:
        return bool(self.problem)

    @property
    def verified(self) -> bool:
        """Its bytes matched a checksum recorded with them."""
        return not self.problem and self.info.checksum is not None


def problem_with(
    data: bytes, info: ObjectInfo, *, usual: int | None, reference: Checksum | None = None
) -> str:
    """Why a block fails its check, or ``""``; see the module for the rules."""
    if not data:
        return "0 bytes: never a valid block"
    if usual is not None and len(data) != usual:
        return (
            f"{len(data)} bytes, but its namespace's blocks are {usual} bytes: a short or "
            "foreign object"
        )
    recorded = info.checksum
    if recorded is not None:
        actual = integrity.compute(recorded.algorithm, data)
        if actual != recorded:
            got = actual.value if actual else "none"
            return f"{recorded.algorithm} checksum mismatch (recorded {recorded.value}, read {got})"
        return ""
    if reference is not None:
        actual = integrity.compute(reference.algorithm, data)
        if actual != reference:
            got = actual.value if actual else "none"
            return (
                f"differs from the good copy ({reference.algorithm} {got}, the good copy's "
                f"is {reference.value}) and records no checksum of its own"
            )
    return ""


def judge(
    store: Store,
    key: str,
    settings: S3Settings,
    *,
    usual: int | None,
    reference: Checksum | None = None,
) -> Judged:
    """Read a block and judge it (:class:`s3kv.ObjectNotFoundError` if absent)."""
    data, info = with_retries(lambda: store.get(key), settings)
    return Judged(key, data, info, problem_with(data, info, usual=usual, reference=reference))


def checksum_for(good: Judged, settings: S3Settings) -> Checksum | None:
    """The checksum a replacement is written with: the good copy's recorded one, or one
    computed from its bytes."""
    return good.info.checksum or integrity.compute(settings.checksum, good.data)


def replace(store: Store, judged: Judged, good: Judged, settings: S3Settings) -> bool:
    """Put ``good``'s bytes in place of the damaged ``judged``; False (nothing written)
    when the object changed or went since it was judged."""
    if not _unchanged(store, judged, settings):
        return False
    etag = _bare(judged.info.etag)
    options = PutOptions(
        create_only=False, checksum=checksum_for(good, settings), tags=BLOCK_TAGS, if_match=etag
    )
    try:
        return with_retries(lambda: store.put(judged.key, good.data, options), settings)
    except ObjectNotFoundError:  # If-Match on a key deleted meanwhile
        return False


def remove(store: Store, judged: Judged, settings: S3Settings) -> bool:
    """Delete the damaged ``judged``; False when it changed or went since it was judged."""
    if not _unchanged(store, judged, settings):
        return False
    etag = _bare(judged.info.etag)
    return with_retries(lambda: store.delete(judged.key, if_match=etag), settings)


def _unchanged(store: Store, judged: Judged, settings: S3Settings) -> bool:
    """The re-check right before acting: still there, and still the object judged."""
    if store.is_local or judged.info.etag is None:
        try:
            data, _ = with_retries(lambda: store.get(judged.key), settings)
        except ObjectNotFoundError:
            return False
        return data == judged.data
    info = with_retries(lambda: store.head(judged.key), settings)
    return info is not None and _bare(info.etag) == _bare(judged.info.etag)


def _bare(etag: str | None) -> str | None:
    """An ETag without its quotes: Ceph RGW 16 matches ``If-Match`` only so (a quoted one
    always fails); moto takes either. Were a store to refuse this form, the write fails
    safe: 412, the block left alone and counted ``changed``."""
    return etag.strip('"') if etag is not None else None


Mended = tuple[Literal["already_present", "replaced"], int, bool]


def mend(
    src: Store,
    src_where: str,
    src_key: str,
    dst: Store,
    dst_where: str,
    dst_key: str,
    *,
    usual: int | None,
    src_settings: S3Settings,
    dst_settings: S3Settings,
    dry_run: bool,
) -> Mended:
    """A destination block that exists: keep it if it passes its check, else replace it
    with the source's if that passes its own. Returns (outcome, bytes written, whether
    the source recorded no checksum); raises :class:`s3kv.IntegrityError` when neither
    copy can be trusted over the other, naming both.

    The source's recorded checksum (one HEAD) is the reference a destination block
    without one of its own is compared with: the source is read only when the
    destination fails, or when neither side records a checksum.
    """
    head = with_retries(lambda: src.head(src_key), src_settings)
    if head is None:
        raise ObjectNotFoundError(f"HEAD {src_where}: no such object")
    recorded = head.checksum
    theirs = judge(dst, dst_key, dst_settings, usual=usual, reference=recorded)
    if not theirs.damaged:
        own = theirs.info.checksum
        # Two valid writes of one block (each matches its own checksum): neither is damaged.
        if (
            own is not None
            and recorded is not None
            and own.algorithm == recorded.algorithm
            and own != recorded
        ):
            raise ChecksumMismatchError(
                f"{dst_where} exists and passes its own {own.algorithm} checksum "
                f"({own.value}), but the source's is {recorded.value}; both valid: left alone"
            )
        if recorded is not None:
            return "already_present", 0, False
        ours = judge(src, src_key, src_settings, usual=usual)
        if ours.data == theirs.data:
            return "already_present", 0, False
        if ours.damaged:
            raise IntegrityError(
                f"{src_where}: {ours.problem}; the destination's copy passes its check: left "
                "alone (repair the source from it with 's3kv repair')"
            )
        raise IntegrityError(
            f"{dst_where} differs from the source and both pass their checks (neither "
            "records a checksum to tell which is right); left alone"
        )
    ours = judge(src, src_key, src_settings, usual=usual)
    if ours.damaged:
        raise IntegrityError(
            f"{dst_where}: {theirs.problem}; the source's copy fails its check too "
            f"({ours.problem}): left alone ('s3kv repair --remove-unrepairable' removes it)"
        )
    if not dry_run and not replace(dst, theirs, ours, dst_settings):
        raise TransientStoreError(
            f"{dst_where} changed while it was being replaced: left alone; run again"
        )
    return "replaced", len(ours.data), ours.info.checksum is None
