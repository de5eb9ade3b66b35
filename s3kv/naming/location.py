"""Where a cache lives: ``s3://bucket/prefix`` or a local directory (vLLM's layout)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from s3kv.errors import InvalidLocationError, InvalidPrefixError, describe_value
from s3kv.naming.keys import normalize_prefix
from s3kv.naming.tenants import TENANTS_FOLDER, check_tenant, tenant_prefix

# S3 bucket naming rules, plus the upper case and underscores older and on-prem buckets
# allow: letters, digits, '.', '-', '_'; a letter or digit at both ends; 3 to 255 long.
_BUCKET = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{1,253})[A-Za-z0-9]$")
# Anything that starts like a URL scheme ("s3:", "s3:/x", "https://", "file:x").
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):")
_FORMS = "s3://bucket[/prefix] or a directory path"


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed location. ``bucket`` is set for S3, ``path`` for a directory."""

    bucket: str | None
    prefix: str
    path: Path | None = None
    given: str = field(default="", compare=False)
    """The text a directory was given as (before ``~`` and the working directory): what
    the user typed, for messages such as "did you mean s3://...?"."""

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

    def for_tenant(self, tenant: str) -> Location:
        """Where ``tenant``'s namespaces live at this location: ``<prefix>/tenants/<tenant>``
        (:mod:`s3kv.naming.tenants`); :class:`InvalidTenantError` for an id outside the
        rule. A directory gets the same folders."""
        if self.bucket is not None:
            return Location(bucket=self.bucket, prefix=tenant_prefix(self.prefix, tenant))
        assert self.path is not None
        path = self.path / TENANTS_FOLDER / check_tenant(tenant)
        return Location(bucket=None, prefix="", path=path, given=str(path))

    def __str__(self) -> str:
        return self.url


def parse_location(text: str | os.PathLike[str]) -> Location:
    """Parse ``s3://bucket[/prefix]`` or a directory path; :class:`InvalidLocationError`
    for anything else.

    Rules (the one parser every command and ``Uploader``/``Downloader`` use):

    * ``s3://`` (scheme in any case), then a bucket name (3-255 of letters, digits, ``.``,
      ``-``, ``_``; a letter or digit at both ends; no ``..``), then optionally ``/`` and
      a prefix of plain segments (no empty, ``.`` or ``..`` segment, no ``?`` or ``#``:
      s3kv locations take no query string or fragment). A trailing ``/`` is ignored.
    * Anything else that starts like a URL scheme (``s3:/x``, ``s3:x``, ``file://x``,
      ``name:x``) is refused rather than taken for a directory; a directory whose name
      holds ``:`` is written ``./name:x``.
    * Otherwise a directory path (no NUL character). It need not exist yet (``pull``
      creates it).
    """
    if isinstance(text, os.PathLike):
        text = os.fspath(text)
    if not isinstance(text, str) or not text:
        raise InvalidLocationError(f"a location is required: {_FORMS}")
    if "\x00" in text:
        raise InvalidLocationError(
            f"{describe_value(text)}: a location cannot hold a NUL character"
        )
    scheme = _SCHEME.match(text)
    if scheme is None:
        try:
            path = Path(text).expanduser()
        except RuntimeError:  # "~name" of no known user
            raise InvalidLocationError(
                f"{describe_value(text)}: no home directory for {text.split('/')[0]!r}; "
                "write ./NAME for a directory whose name starts with '~'"
            ) from None
        return Location(bucket=None, prefix="", path=path.absolute(), given=text)
    if scheme["scheme"].lower() != "s3":
        raise InvalidLocationError(
            f"{describe_value(text)}: unsupported scheme {scheme['scheme']!r}; use "
            "s3://bucket/prefix (S3, MinIO, Ceph and other S3-compatible stores all use s3:// "
            "with --endpoint-url), or write a directory whose name holds ':' as ./NAME"
        )
    if not text[3:].startswith("//"):
        raise InvalidLocationError(
            f"{describe_value(text)}: malformed S3 URL; write s3://bucket/prefix (two "
            "slashes), or ./NAME for a directory whose name holds ':'"
        )
    return _parse_s3(text)


def _parse_s3(text: str) -> Location:
    bucket, _, prefix = text[5:].partition("/")
    if not bucket:
        raise InvalidLocationError(
            f"{describe_value(text)}: no bucket name; write s3://bucket/prefix"
        )
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise InvalidLocationError(
            f"{describe_value(text)}: {describe_value(bucket)} is not a valid bucket name; "
            "expected s3://bucket/prefix with a 3-255 character bucket name of letters, "
            "digits, '.', '-' and '_'"
        )
    if "?" in prefix or "#" in prefix:
        raise InvalidLocationError(
            f"{describe_value(text)}: s3kv locations take no query string or fragment "
            "('?', '#'); write s3://bucket/prefix"
        )
    if prefix.startswith("/"):
        raise InvalidLocationError(
            f"{describe_value(text)}: empty path segment after the bucket; write "
            f"s3://{bucket}/{prefix.lstrip('/')}"
        )
    try:
        return Location(bucket=bucket, prefix=normalize_prefix(prefix))
    except InvalidPrefixError as exc:
        raise InvalidLocationError(f"{describe_value(text)}: {exc}") from None
