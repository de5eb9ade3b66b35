"""Object keys for KV blocks and manifests, byte-identical to vLLM's ``FileMapper``.

Pure string work, no I/O. The layout is defined once, here: :func:`block_path` and
:func:`manifest_path` give a key's path below the prefix; :class:`KeyMapper` puts the
prefix in front and :func:`s3kv.parse_key` accepts exactly what they build.

One layout, two names for it (``KeyStyle``):

* ``"s3kv"`` (default): ``<prefix>/<folder>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin`` and
  ``<prefix>/<folder>/config.json``: what ``FileMapper(root_dir=prefix)`` returns, so a
  tree synced from vLLM's filesystem tier lands on the same keys. With no prefix the
  keys start at the folder (no leading ``/``).
* ``"vllm-obj"``: an alias of ``"s3kv"``, the keys vLLM 0.33.0's object-store tier
  (``ObjectStoreSecondaryTierManager``) stores. Its ``FileMapper`` strings read
  ``prefix//<folder>...`` (or ``/<folder>...`` without a prefix), but NIXL's AWS C++ SDK
  drops the empty path segments, so what reaches the bucket is the layout above
  (recorded on moto's server and Ceph RGW 16: ``tests/data/vllm_obj_tier_wire_keys.json``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from s3kv.errors import InvalidKeyError, InvalidPrefixError, describe_value
from s3kv.naming.namespace import CONFIG_FILENAME, Namespace

KeyStyle = Literal["s3kv", "vllm-obj"]
KEY_STYLES: tuple[KeyStyle, ...] = ("s3kv", "vllm-obj")
"""Accepted style names; both mean the one layout (``"vllm-obj"`` is an alias)."""

MAX_KEY_BYTES = 1024
"""S3's limit on the UTF-8 length of an object key."""

GROUP_IDX_BYTES = 4
MIN_BLOCK_HASH_BYTES = 3
"""The two fan-out folders take the first five hex digits of the hash."""
MAX_GROUP_IDX = 2**32 - 1


def make_offload_key(block_hash: bytes, group_idx: int = 0) -> bytes:
    """vLLM's OffloadKey: ``block_hash + group_idx.to_bytes(4, "big")``."""
    _check_hash(block_hash)
    _check_group(group_idx)
    return bytes(block_hash) + group_idx.to_bytes(GROUP_IDX_BYTES, "big")


def split_offload_key(offload_key: bytes) -> tuple[bytes, int]:
    """The inverse of :func:`make_offload_key`: ``(block_hash, group_idx)``."""
    _check_offload_key(offload_key)
    return bytes(offload_key[:-GROUP_IDX_BYTES]), int.from_bytes(
        offload_key[-GROUP_IDX_BYTES:], "big"
    )


def rank_folder(folder: str, rank: int) -> str:
    """``<folder>_r<rank>``: the folder of one rank's blocks."""
    return f"{folder}_r{rank}"


def block_file(offload_key: bytes) -> str:
    """``<hhh>/<hh>_g<group>/<hash>.bin``: a block's path below its rank folder."""
    h = offload_key[:-4].hex()
    g = _GROUP_PARTS.get(offload_key[-4:]) or _group_part(offload_key[-4:])
    return f"{h[:3]}/{h[3:5]}{g}{h}.bin"


# "_g<group>/" per 4-byte group suffix: vLLM has a handful of KV-cache groups, and the
# int conversion is a third of block_file's time.
_GROUP_PARTS: dict[bytes, str] = {}


def _group_part(suffix: bytes) -> str:
    part = f"_g{int.from_bytes(suffix, 'big')}/"
    if len(_GROUP_PARTS) < 4096:
        _GROUP_PARTS[suffix] = part
    return part


def block_path(folder: str, rank: int, offload_key: bytes) -> str:
    """A block's key below the prefix (its path under a vLLM filesystem-tier root)."""
    return f"{rank_folder(folder, rank)}/{block_file(offload_key)}"


def manifest_path(folder: str) -> str:
    """The manifest's key below the prefix: ``<folder>/config.json``."""
    return f"{folder}/{CONFIG_FILENAME}"


def join_prefix(prefix: str, path: str) -> str:
    """A normalised prefix and a path below it: ``prefix/path``, or ``path`` alone."""
    return f"{prefix}/{path}" if prefix else path


def normalize_prefix(prefix: str) -> str:
    """Trim surrounding ``/`` and reject what cannot be a safe key prefix.

    Rejected: empty segments (``a//b``), ``.`` or ``..`` segments, control characters.
    """
    if not isinstance(prefix, str):
        raise InvalidPrefixError(f"prefix must be a str; got {describe_value(prefix)}")
    trimmed = prefix.strip("/")
    if not trimmed:
        return ""
    for segment in trimmed.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidPrefixError(
                f"prefix {prefix!r} has an empty, '.' or '..' segment; use plain names "
                "separated by single '/', such as 'team/kv-cache'"
            )
    bad = [c for c in trimmed if ord(c) < 32 or ord(c) == 127]
    if bad:
        raise InvalidPrefixError(
            f"prefix {describe_value(prefix)} contains control character(s) "
            f"{sorted({hex(ord(c)) for c in bad})}; remove them"
        )
    if len(trimmed.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidPrefixError(f"prefix is longer than S3's {MAX_KEY_BYTES}-byte key limit")
    return trimmed


class KeyMapper:
    """Maps a namespace's blocks and manifest to object keys under a prefix.

    >>> ns = Namespace(model_name="m", tokens_per_hash=16, dtype="float16")
    >>> KeyMapper(ns, prefix="kv").block_key(bytes(range(8)), 2)
    'kv/m_..._r0/000/10_g2/0001020304050607.bin'  # doctest: +SKIP
    """

    __slots__ = (
        "_base",
        "_config_key",
        "_max_hash_bytes",
        "_max_key_bytes",
        "namespace",
        "prefix",
        "style",
    )

    def __init__(self, namespace: Namespace, prefix: str = "", style: KeyStyle = "s3kv") -> None:
        if not isinstance(namespace, Namespace):
            raise InvalidKeyError(
                f"namespace must be an s3kv.Namespace; got {type(namespace).__name__}"
            )
        if style not in KEY_STYLES:
            raise InvalidKeyError(f"style must be one of {KEY_STYLES}; got {style!r}")
        self.namespace = namespace
        self.prefix = normalize_prefix(prefix)
        self.style: KeyStyle = style
        self._base = join_prefix(self.prefix, rank_folder(namespace.folder, namespace.rank)) + "/"
        self._config_key = join_prefix(self.prefix, manifest_path(namespace.folder))
        # Longest key: base + "hhh/" + "hh_g<10 digits>/" + hex + ".bin".
        fixed = len(self._base.encode("utf-8")) + 4 + 3 + 10 + 1 + 4
        self._max_hash_bytes = (MAX_KEY_BYTES - fixed) // 2
        self._max_key_bytes = self._max_hash_bytes + GROUP_IDX_BYTES
        if self._max_hash_bytes < 32 or len(self._config_key.encode("utf-8")) > MAX_KEY_BYTES:
            raise InvalidPrefixError(
                f"prefix {self.prefix[:40]!r}... with folder {namespace.folder!r} leaves no "
                f"room for 32-byte block hashes within S3's {MAX_KEY_BYTES}-byte key limit; "
                "use a shorter prefix"
            )

    @property
    def root(self) -> str:
        """What precedes the namespace folder in every key (``prefix/``, or nothing)."""
        return join_prefix(self.prefix, "")

    def key_for(self, offload_key: bytes) -> str:
        """The block key of a vLLM OffloadKey (block hash + 4-byte big-endian group)."""
        if type(offload_key) is not bytes or not 7 <= len(offload_key) <= self._max_key_bytes:
            self._reject(offload_key)
        return self._base + block_file(offload_key)

    def keys_for(self, offload_keys: Iterable[bytes]) -> list[str]:
        """:meth:`key_for` over many keys."""
        base, top, file = self._base, self._max_key_bytes, block_file
        out: list[str] = []
        append = out.append
        for k in offload_keys:
            if type(k) is not bytes or not 7 <= len(k) <= top:
                self._reject(k)
            append(base + file(k))
        return out

    def block_key(self, block_hash: bytes, group_idx: int = 0) -> str:
        """The block key of a block hash and KV-cache group index."""
        _check_hash(block_hash)
        _check_group(group_idx)
        if len(block_hash) > self._max_hash_bytes:
            raise InvalidPrefixError(self._too_long(len(block_hash)))
        return self._base + block_file(bytes(block_hash) + group_idx.to_bytes(4, "big"))

    def config_key(self) -> str:
        """The key of the namespace manifest (``<folder>/config.json``)."""
        return self._config_key

    def rank_prefix(self) -> str:
        """The listing prefix of this rank's blocks (ends with ``/``)."""
        return self._base

    def namespace_prefix(self) -> str:
        """The listing prefix of the manifest folder (ends with ``/``)."""
        return self._config_key[: -len(CONFIG_FILENAME)]

    def _reject(self, offload_key: object) -> None:
        if not isinstance(offload_key, bytes):
            raise InvalidKeyError(
                f"offload key must be bytes (block hash + 4-byte group index); got "
                f"{type(offload_key).__name__} {describe_value(offload_key)}"
            )
        _check_offload_key(offload_key)
        raise InvalidPrefixError(self._too_long(len(offload_key) - GROUP_IDX_BYTES))

    def _too_long(self, hash_bytes: int) -> str:
        return (
            f"a {hash_bytes}-byte block hash under prefix {self.prefix!r} makes a key longer "
            f"than S3's {MAX_KEY_BYTES} bytes; use a shorter prefix"
        )

    def __repr__(self) -> str:
        return f"KeyMapper({self.namespace!r}, prefix={self.prefix!r}, style={self.style!r})"


def _check_hash(block_hash: object) -> None:
    if not isinstance(block_hash, (bytes, bytearray, memoryview)):
        raise InvalidKeyError(
            f"block_hash must be bytes; got {type(block_hash).__name__} "
            f"{describe_value(block_hash)} (use bytes.fromhex for hex strings)"
        )
    if len(block_hash) < MIN_BLOCK_HASH_BYTES:
        raise InvalidKeyError(
            f"block_hash must be at least {MIN_BLOCK_HASH_BYTES} bytes; got "
            f"{len(block_hash)} ({bytes(block_hash).hex() or 'empty'})"
        )


def _check_group(group_idx: object) -> None:
    if type(group_idx) is not int or not 0 <= group_idx <= MAX_GROUP_IDX:
        raise InvalidKeyError(
            f"group_idx must be an int in 0..{MAX_GROUP_IDX}; got {describe_value(group_idx)}"
        )


def _check_offload_key(offload_key: object) -> None:
    if not isinstance(offload_key, (bytes, bytearray)):
        raise InvalidKeyError(
            f"offload key must be bytes (block hash + 4-byte group index); got "
            f"{type(offload_key).__name__}"
        )
    if len(offload_key) < MIN_BLOCK_HASH_BYTES + GROUP_IDX_BYTES:
        raise InvalidKeyError(
            f"offload key must be at least {MIN_BLOCK_HASH_BYTES + GROUP_IDX_BYTES} bytes "
            f"(a {MIN_BLOCK_HASH_BYTES}+ byte hash and a 4-byte group); got {len(offload_key)}"
        )
