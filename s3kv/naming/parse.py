"""Reading keys back: the inverse of :class:`s3kv.KeyMapper`.

Listing, verification, collection and ``pull`` stand on :func:`parse_key`: a key from a
bucket is trusted only once it parses, and only a parsed key is turned into a path.
The regular expressions below only pick a key apart; a key parses only if
:mod:`s3kv.naming.keys` builds exactly that key back from the parts, so the layout has one
definition (``block_path``/``manifest_path``) and parsing is its exact inverse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from s3kv.errors import NotAnS3KVKeyError, describe_value
from s3kv.naming.keys import (
    GROUP_IDX_BYTES,
    MAX_GROUP_IDX,
    MAX_KEY_BYTES,
    KeyStyle,
    block_path,
    join_prefix,
    manifest_path,
)
from s3kv.naming.namespace import CONFIG_FILENAME, DIGEST_LENGTH

_FOLDER = re.compile(rf"^(?P<model>.+)_(?P<digest>[0-9a-f]{{{DIGEST_LENGTH}}})$")
_RANK_FOLDER = re.compile(
    rf"^(?P<folder>(?P<model>.+)_(?P<digest>[0-9a-f]{{{DIGEST_LENGTH}}}))_r(?P<rank>0|[1-9][0-9]*)$"
)
_GROUP_FOLDER = re.compile(r"^(?P<h2>[0-9a-f]{2})_g(?P<group>0|[1-9][0-9]{0,9})$")
_FILE = re.compile(r"^(?P<hash>(?:[0-9a-f]{2}){3,})\.bin$")
_SUSPICIOUS = re.compile(r"[\x00-\x1f\x7f\\]")


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """What a key in the layout says about itself."""

    kind: Literal["block", "manifest"]
    style: KeyStyle
    """Always ``"s3kv"``: vLLM's filesystem and object-store tiers store the same keys."""
    prefix: str
    """The prefix before the namespace folder, without surrounding ``/``."""
    folder: str
    """``<model part>_<digest>``: the namespace folder."""
    model_part: str
    """The model name with ``/`` replaced by ``_`` (the original is in the manifest)."""
    digest: str
    rank: int | None = None
    group_idx: int | None = None
    block_hash: bytes | None = None

    @property
    def offload_key(self) -> bytes:
        """The vLLM OffloadKey of a block key."""
        if self.block_hash is None or self.group_idx is None:
            raise NotAnS3KVKeyError(f"{self.folder}/{CONFIG_FILENAME} is a manifest, not a block")
        return self.block_hash + self.group_idx.to_bytes(GROUP_IDX_BYTES, "big")

    @property
    def relative_path(self) -> str:
        """The key without prefix: the path under a vLLM filesystem-tier root."""
        if self.kind == "manifest":
            return manifest_path(self.folder)
        assert self.rank is not None
        return block_path(self.folder, self.rank, self.offload_key)

    @property
    def key(self) -> str:
        """The full key: the prefix, then :attr:`relative_path`."""
        return join_prefix(self.prefix, self.relative_path)


def parse_folder(name: str) -> tuple[str, str, int | None] | None:
    """A cache's top folder name as (namespace folder, digest, rank): a rank folder
    ``<model>_<digest>_r<rank>`` or a namespace folder ``<model>_<digest>`` (rank None);
    None for any other name."""
    found = _RANK_FOLDER.match(name)
    if found:
        return found["folder"], found["digest"], int(found["rank"])
    found = _FOLDER.match(name)
    if found:
        return name, found["digest"], None
    return None


def parse_key(key: str) -> ParsedKey:
    """Parse a block or manifest key; :class:`NotAnS3KVKeyError` for anything else.

    Accepts exactly the keys :class:`s3kv.KeyMapper` builds (any style: they share one
    layout), which are also the keys vLLM's filesystem and object-store tiers store.
    """
    if not isinstance(key, str):
        raise NotAnS3KVKeyError(f"a key must be a str; got {type(key).__name__}")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise NotAnS3KVKeyError(
            f"not an s3kv key (longer than {MAX_KEY_BYTES} bytes): {key[:60]!r}..."
        )
    if _SUSPICIOUS.search(key):
        raise NotAnS3KVKeyError(
            f"not an s3kv key (control character or backslash): {describe_value(key)}"
        )
    parts = key.split("/")
    if parts[-1] == CONFIG_FILENAME and len(parts) >= 2:
        match = _FOLDER.match(parts[-2])
        if match:
            return _rebuilt(
                key,
                kind="manifest",
                prefix=_prefix_of(key, parts[:-2]),
                folder=parts[-2],
                model_part=match["model"],
                digest=match["digest"],
            )
    elif len(parts) >= 4:
        rank_m = _RANK_FOLDER.match(parts[-4])
        group_m = _GROUP_FOLDER.match(parts[-2])
        file_m = _FILE.match(parts[-1])
        if rank_m and group_m and file_m and int(group_m["group"]) <= MAX_GROUP_IDX:
            # The fan-out folders (parts[-3], the "hh" of parts[-2]) are checked by _rebuilt.
            return _rebuilt(
                key,
                kind="block",
                prefix=_prefix_of(key, parts[:-4]),
                folder=rank_m["folder"],
                model_part=rank_m["model"],
                digest=rank_m["digest"],
                rank=int(rank_m["rank"]),
                group_idx=int(group_m["group"]),
                block_hash=bytes.fromhex(file_m["hash"]),
            )
    raise NotAnS3KVKeyError(
        f"not an s3kv key: {describe_value(key)}; expected "
        "[prefix/]<model>_<digest>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin or "
        "[prefix/]<model>_<digest>/config.json"
    )


def _prefix_of(key: str, segments: list[str]) -> str:
    """The prefix from the segments before the folder; rejects unsafe ones."""
    for segment in segments:
        if segment in ("", ".", ".."):
            raise NotAnS3KVKeyError(
                f"not an s3kv key (empty, '.' or '..' path segment): {describe_value(key)}"
            )
    return "/".join(segments)


def _rebuilt(key: str, **fields: Any) -> ParsedKey:
    """The parts of ``key``, if :mod:`s3kv.naming.keys` builds ``key`` back from them."""
    parsed = ParsedKey(style="s3kv", **fields)
    if parsed.key != key:
        raise NotAnS3KVKeyError(
            f"not an s3kv key (not in the layout s3kv builds; it would read "
            f"{parsed.key!r}): {describe_value(key)}"
        )
    return parsed
