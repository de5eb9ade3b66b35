"""A block's place in its chain, as s3kv writes it, and the order gc deletes in.

vLLM's prefix cache is a forest: a block's hash covers its parent's, so a chain is only
ever used from its head, and a block whose ancestor is gone can never be hit again (a
*headless* chain, or a *hole*). Last-Modified cannot tell a chain's order: its blocks
are written together (within one second on AWS and moto, in any order on Ceph RGW, which
lists milliseconds) and renewed together. So s3kv's tier writes each block's parent
with it, in user metadata (``x-amz-meta-s3kv-parent``: the parent block's hash in hex;
none for a chain's first block, or when the tier was not told), and never changes it:
the hash of a block fixes its parent. The object key stays vLLM's.

:func:`delete_order` is the rule ``gc`` applies to the blocks near its cutoff (read with
one HEAD each): a block's *last use* is the latest Last-Modified in its subtree (using a
block means using every ancestor), and blocks go by that, deepest first on ties. An
ancestor therefore never goes before a descendant that stays: whatever ``gc`` keeps of a
chain is a prefix of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from s3kv.errors import NotAnS3KVKeyError
from s3kv.naming.keys import GROUP_IDX_BYTES, block_path, join_prefix
from s3kv.naming.parse import ParsedKey

PARENT_METADATA_KEY = "s3kv-parent"
"""User metadata naming a block's parent: ``x-amz-meta-s3kv-parent: <hash hex>``."""


def parent_metadata(parent: bytes | None) -> dict[str, str]:
    """The metadata a block is written with, given its parent's OffloadKey."""
    if parent is None or len(parent) <= GROUP_IDX_BYTES:
        return {}
    return {PARENT_METADATA_KEY: parent[:-GROUP_IDX_BYTES].hex()}


def parent_key(child: ParsedKey, metadata: Mapping[str, str]) -> str | None:
    """The object key of ``child``'s parent from its metadata (same namespace, rank and
    group); None without one, or when the field is not a block hash."""
    value = metadata.get(PARENT_METADATA_KEY)
    if not value or child.rank is None or child.group_idx is None:
        return None
    try:
        block_hash = bytes.fromhex(value)
    except ValueError:
        return None
    if not 3 <= len(block_hash) <= 64:
        return None
    offload_key = block_hash + child.group_idx.to_bytes(GROUP_IDX_BYTES, "big")
    try:
        return join_prefix(child.prefix, block_path(child.folder, child.rank, offload_key))
    except NotAnS3KVKeyError:
        return None


@dataclass(frozen=True, slots=True)
class Node:
    """A block near the cutoff: its Last-Modified (seconds) and its parent's key."""

    key: str
    modified: float
    parent: str | None


@dataclass(frozen=True, slots=True)
class Placed:
    """A block's place in the delete order."""

    key: str
    last_use: float
    """The latest Last-Modified in its subtree (among the nodes given)."""
    depth: int
    """Ancestors among the nodes given."""


def place(nodes: Iterable[Node]) -> dict[str, Placed]:
    """Each node's last use and depth, following parents among ``nodes`` only (a parent
    not among them counts as absent: the node is a root here). Cycles, which no hash
    chain has, are cut."""
    by_key = {n.key: n for n in nodes}
    depth: dict[str, int] = {}
    for start in by_key:
        path: list[str] = []
        key: str | None = start
        while key is not None and key in by_key and key not in depth and key not in path:
            path.append(key)
            key = by_key[key].parent
        base = depth.get(key, -1) if key is not None else -1
        for i, k in enumerate(reversed(path)):
            depth[k] = base + 1 + i
    last_use = {k: n.modified for k, n in by_key.items()}
    for key in sorted(by_key, key=lambda k: -depth[k]):  # children before parents
        parent = by_key[key].parent
        if parent in last_use and depth[parent] < depth[key]:
            last_use[parent] = max(last_use[parent], last_use[key])
    return {k: Placed(k, last_use[k], depth[k]) for k in by_key}


def delete_order(nodes: Iterable[Node]) -> list[Placed]:
    """Least recently used first by subtree, deepest first on ties (see the module)."""
    return sorted(place(nodes).values(), key=lambda p: (p.last_use, -p.depth, p.key))
