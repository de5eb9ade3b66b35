"""Where a cache lives: ``s3://bucket/prefix`` or a local directory (vLLM's layout)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from s3kv.errors import InvalidLocationError, InvalidPrefixError
from s3kv.keys import normalize_prefix

# S3 bucket naming rules (plus the dots and underscores older/on-prem buckets allow).
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed location. ``bucket`` is set for S3, ``path`` for a directory."""

    bucket: str | None
    prefix: str
    path: Path | None = None

    @property
    def is_s3(self) -> bool:
        return self.bucket is not None

    @property
    def url(self) -> str:
        if self.bucket is not None:
            return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return str(self.path)

    def url_for(self, key: str) -> str:
        """A printable address of one key at this location."""
        if self.bucket is not None:
            return f"s3://{self.bucket}/{key}"
        assert self.path is not None
        return str(self.path / key)

    def __str__(self) -> str:
        return self.url


def parse_location(text: str | os.PathLike[str]) -> Location:
    """Parse ``s3://bucket[/prefix]`` or a directory path.

    The directory need not exist yet (``pull`` creates it).
    """
    if isinstance(text, os.PathLike):
        text = os.fspath(text)
    if not isinstance(text, str) or not text:
        raise InvalidLocationError("a location is required: s3://bucket/prefix or a directory path")
    lowered = text.lower()
    if lowered.startswith("s3://"):
        rest = text[5:]
        bucket, _, prefix = rest.partition("/")
        if not _BUCKET.match(bucket):
            raise InvalidLocationError(
                f"{text!r}: {bucket!r} is not a valid bucket name; expected "
                "s3://bucket/prefix with a 3-255 character bucket name"
            )
        try:
            return Location(bucket=bucket, prefix=normalize_prefix(prefix))
        except InvalidPrefixError as exc:
            raise InvalidLocationError(f"{text!r}: {exc}") from None
    if re.match(r"^[a-z][a-z0-9+.-]*://", lowered):
        raise InvalidLocationError(
            f"{text!r}: unsupported scheme; use s3://bucket/prefix (S3, MinIO, Ceph and other "
            "S3-compatible stores all use s3:// with --endpoint-url) or a directory path"
        )
    return Location(bucket=None, prefix="", path=Path(text).expanduser().absolute())
