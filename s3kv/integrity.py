"""End-to-end block checksums that hold on every S3-compatible store.

Some stores keep S3's flexible checksums (AWS, MinIO); some accept and ignore them
(Ceph RGW 16); a directory keeps none. So s3kv records its own checksum in the object's
user metadata (``x-amz-meta-s3kv-checksum: crc32c:<base64>``), which every S3 store
returns with the object, and verifies it after every download. The same base64 value is
also sent as S3's own checksum header where the algorithm has one, so stores that check
it reject a corrupted upload on arrival.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from awscrt import checksums as _crt

from s3kv.errors import ChecksumMismatchError, SettingsError, SizeMismatchError

METADATA_KEY = "s3kv-checksum"
"""User-metadata key (sent as ``x-amz-meta-s3kv-checksum``)."""
WRITE_ID_KEY = "s3kv-write-id"
"""User-metadata key of a write's token (see :mod:`s3kv.transfers.writes`)."""

Buffer = bytes | bytearray | memoryview


def _crc32c(data: Buffer) -> bytes:
    return int(_crt.crc32c(data)).to_bytes(4, "big")


def _crc32(data: Buffer) -> bytes:
    return zlib.crc32(data).to_bytes(4, "big")


def _sha256(data: Buffer) -> bytes:
    return hashlib.sha256(data).digest()


_ALGORITHMS: dict[str, tuple[Callable[[Buffer], bytes], str]] = {
    # name: (digest function, S3 PutObject parameter carrying the same value)
    "crc32c": (_crc32c, "ChecksumCRC32C"),
    "crc32": (_crc32, "ChecksumCRC32"),
    "sha256": (_sha256, "ChecksumSHA256"),
}


@dataclass(frozen=True, slots=True)
class Checksum:
    """An algorithm and its base64 value, as S3 writes checksums."""

    algorithm: str
    value: str

    def header(self) -> str:
        return f"{self.algorithm}:{self.value}"

    @property
    def s3_parameter(self) -> str:
        return _ALGORITHMS[self.algorithm][1]

    @classmethod
    def parse(cls, text: str) -> Checksum | None:
        """From a metadata value; None when absent or unknown (treated as unchecked)."""
        algorithm, _, value = text.partition(":")
        if algorithm in _ALGORITHMS and value:
            return cls(algorithm, value)
        return None


def compute(algorithm: str, data: Buffer) -> Checksum | None:
    """The checksum of ``data`` (None for algorithm ``"none"``)."""
    if algorithm == "none":
        return None
    try:
        fn = _ALGORITHMS[algorithm][0]
    except KeyError:
        raise SettingsError(
            f"unknown checksum {algorithm!r}; use one of {[*_ALGORITHMS, 'none']}"
        ) from None
    return Checksum(algorithm, base64.b64encode(fn(data)).decode("ascii"))


def verify(expected: Checksum, data: Buffer, *, where: str) -> None:
    """Raise :class:`ChecksumMismatchError` unless ``data`` has the expected checksum."""
    actual = compute(expected.algorithm, data)
    if actual != expected:
        got = actual.value if actual else "none"
        raise ChecksumMismatchError(
            f"{where}: {expected.algorithm} checksum mismatch (stored {expected.value}, "
            f"read {got}); the object was changed or damaged after it was written"
        )


def verified(
    expected: Checksum, data: Buffer, reread: Callable[[], Buffer], *, where: str
) -> Buffer:
    """``data`` if it has the expected checksum; else the block read once more.

    One mismatch may be damage on the wire (a flipped bit past TCP's checksum, a faulty
    proxy), so it is not blamed on the object: the block is read again. A second mismatch
    raises :class:`ChecksumMismatchError` saying whether both reads agreed (the stored
    object is damaged) or not (something on the way keeps changing the bytes).
    """
    again: list[Buffer] = []

    def second() -> Checksum | None:
        again.append(reread())
        return compute(expected.algorithm, again[0])

    settle(expected, compute(expected.algorithm, data), second, where=where)
    return again[0] if again else data


def settle(
    expected: Checksum, first: Checksum | None, second: Callable[[], Checksum | None], *,
    where: str,
) -> None:
    """:func:`verified` on checksums: ``first`` is the block's as read; on a mismatch
    ``second()`` reads it once more and gives its checksum. Raises
    :class:`ChecksumMismatchError` (:func:`mismatch`) when that one differs too."""
    if first == expected:
        return
    again = second()
    if again != expected:
        raise mismatch(expected, first, again, where=where)


def mismatch(
    expected: Checksum, first: Checksum | None, again: Checksum | None, *, where: str
) -> ChecksumMismatchError:
    """The error of a block read twice, neither read with the ``expected`` checksum:
    whether both reads agreed (the stored object is damaged) or not (something on the
    way keeps changing the bytes)."""
    got = again.value if again else "none"
    if first == again:
        why = (
            "read twice with the same result: the object was changed or damaged after it "
            "was written"
        )
    else:
        why = (
            f"read twice with different results ({first.value if first else 'none'}, {got}): "
            "the bytes change on the way (network, proxy or store)"
        )
    return ChecksumMismatchError(
        f"{where}: {expected.algorithm} checksum mismatch (stored {expected.value}, read "
        f"{got}); {why}"
    )


def check_size(size: int, expected: int | None, *, where: str) -> None:
    """The only check a block without a recorded checksum gets: its size.

    Every block of a namespace has one size (the CPU row stride); ``expected`` is that
    size where known (the caller's buffer, or learned), None where not. A 0-byte block
    is never valid. Raises :class:`SizeMismatchError`.
    """
    if size == 0:
        raise SizeMismatchError(
            f"{where}: 0 bytes and no recorded checksum; never a valid block (an "
            "interrupted write or a foreign object)"
        )
    if expected is not None and size != expected:
        raise SizeMismatchError(
            f"{where}: {size} bytes, expected {expected} (the namespace's block size), and "
            "no recorded checksum; a truncated or foreign object"
        )
