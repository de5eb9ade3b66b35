"""What a block write carries, whichever client sends it: its condition (create-only or
``If-Match``), its checksum header, s3kv's metadata (checksum, write token, chain) and
its tags. Part of the rules every request follows (:mod:`.rules`).
"""

from __future__ import annotations

from urllib.parse import quote

from s3kv.integrity import METADATA_KEY, WRITE_ID_KEY
from s3kv.settings import S3Settings
from s3kv.stores.base import PutOptions

META_CHECKSUM = f"x-amz-meta-{METADATA_KEY}"
META_WRITE_ID = f"x-amz-meta-{WRITE_ID_KEY}"


def write_metadata(options: PutOptions) -> dict[str, str]:
    """s3kv's user metadata of a write: its checksum, its write token and what else the
    writer records (a block's parent in its chain, :mod:`s3kv.naming.chains`)."""
    metadata = {}
    if options.checksum is not None:
        metadata[METADATA_KEY] = options.checksum.header()
    if options.write_id is not None:
        metadata[WRITE_ID_KEY] = options.write_id
    metadata.update(options.metadata)
    return metadata


def tagging(options: PutOptions, settings: S3Settings) -> str:
    """The ``x-amz-tagging`` value of a write ("" for none, or with tags turned off)."""
    if not options.tags or not settings.tag_blocks:
        return ""
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in options.tags.items())


def write_headers(options: PutOptions, settings: S3Settings) -> list[tuple[str, str]]:
    """A block PUT's headers: its condition, checksum, metadata and tags."""
    headers: list[tuple[str, str]] = []
    if options.create_only:
        headers.append(("If-None-Match", "*"))
    if options.if_match is not None:
        headers.append(("If-Match", options.if_match))
    if options.checksum is not None:
        headers.append((f"x-amz-checksum-{options.checksum.algorithm}", options.checksum.value))
    headers += [(f"x-amz-meta-{k}", v) for k, v in write_metadata(options).items()]
    tags = tagging(options, settings)
    if tags:
        headers.append(("x-amz-tagging", tags))
    return headers
