"""s3kv.naming.chains: the order gc deletes blocks near its cutoff in, as pure functions.

A prefix cache is a forest (chains share their heads). Whatever the Last-Modified of
each block, deleting in :func:`delete_order` and stopping anywhere must leave every kept
block's ancestors kept: no hole, no headless chain. Checked on hand-made trees and on
random ones.
"""

from __future__ import annotations

import random

import pytest

from s3kv.naming.chains import PARENT_METADATA_KEY, Node, delete_order, parent_key, parent_metadata
from s3kv.naming.keys import KeyMapper, make_offload_key
from s3kv.naming.namespace import Namespace
from s3kv.naming.parse import parse_key

pytestmark = pytest.mark.unit


def _closed(order: list[str], parents: dict[str, str | None]) -> bool:
    """Every prefix of ``order`` (what was deleted) leaves the rest closed upwards."""
    for cut in range(len(order) + 1):
        deleted = set(order[:cut])
        for key in order[cut:]:  # kept
            parent = parents.get(key)
            while parent is not None:
                if parent in deleted:
                    return False
                parent = parents.get(parent)
    return True


def test_a_shared_head_outlives_every_branch_and_the_coldest_branch_goes_first() -> None:
    # head -> a1 -> a2 (used long ago), head -> b1 -> b2 -> b3 (used a minute ago);
    # the head itself was written first and never renewed: the oldest Last-Modified.
    nodes = [Node("head", 0, None), Node("a1", 10, "head"), Node("a2", 10, "a1"),
             Node("b1", 60, "head"), Node("b2", 60, "b1"), Node("b3", 60, "b2")]
    order = [p.key for p in delete_order(nodes)]
    assert order == ["a2", "a1", "b3", "b2", "b1", "head"]
    placed = {p.key: p for p in delete_order(nodes)}
    assert placed["head"].last_use == 60 and placed["head"].depth == 0


def test_blocks_written_in_one_second_go_deepest_first() -> None:
    chain = [f"c{i:02d}" for i in range(16)]
    nodes = [Node(k, 1000, chain[i - 1] if i else None) for i, k in enumerate(chain)]
    assert [p.key for p in delete_order(nodes)] == chain[::-1]


def test_random_forests_never_lose_an_ancestor_before_a_descendant() -> None:
    rng = random.Random(28)
    for _ in range(200):
        keys = [f"k{i}" for i in range(rng.randint(1, 40))]
        parents: dict[str, str | None] = {}
        for i, key in enumerate(keys):
            parents[key] = keys[rng.randrange(i)] if i and rng.random() < 0.9 else None
        # any times at all: renewed in any order, written in any order
        nodes = [Node(k, rng.choice([0.0, 1.0, 2.5, rng.random() * 100]), parents[k])
                 for k in keys]
        rng.shuffle(nodes)
        order = [p.key for p in delete_order(nodes)]
        assert sorted(order) == sorted(keys)
        assert _closed(order, parents)


def test_a_parent_outside_the_nodes_makes_a_root_and_a_cycle_is_cut() -> None:
    nodes = [Node("x", 5, "not-near-the-cutoff"), Node("y", 5, "x")]
    assert [p.key for p in delete_order(nodes)] == ["y", "x"]
    looped = [Node("p", 1, "q"), Node("q", 1, "p")]
    assert sorted(p.key for p in delete_order(looped)) == ["p", "q"]


def test_the_parent_metadata_names_the_parent_block_key() -> None:
    ns = Namespace(model_name="Qwen/Qwen3-0.6B", tokens_per_hash=16, dtype="bfloat16")
    mapper = KeyMapper(ns, prefix="team/kv")
    parent, child = make_offload_key(b"\x01" * 32, 3), make_offload_key(b"\x02" * 32, 3)
    metadata = parent_metadata(parent)
    assert metadata == {PARENT_METADATA_KEY: (b"\x01" * 32).hex()}
    assert parent_key(parse_key(mapper.key_for(child)), metadata) == mapper.key_for(parent)
    assert parent_metadata(None) == {}
    for bad in ({PARENT_METADATA_KEY: "not hex"}, {PARENT_METADATA_KEY: "ab"}, {}):
        assert parent_key(parse_key(mapper.key_for(child)), bad) is None
