"""Each stored block's parent, from what vLLM's scheduler tells a store job.

The scheduler records every key of a request with its end-token position
(``ReqContext.set_offload_key_position``, for each group ``tokens_per_chunk`` apart), and
a store job carries that context. A key's parent is the same group's key one chunk
earlier in the same request: found among the request's keys (an index built once per
request and extended as the request grows, kept in its context), else among the job's
own keys. Without positions (a caller that records none), the job's keys are taken in
the order given, which is the chain's (vLLM hands a request's chunks over in order), and
the first one's parent stays unknown. What this gives is written with each block
(:mod:`s3kv.naming.chains`) so ``gc`` keeps a prefix of every chain.

Runs on the scheduler's thread, in ``submit_store``: the positions are the scheduler's
to change, and the work is a dictionary look-up per key (plus, once per request and
store, a scan of the keys added since the last one).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from vllm.v1.kv_offload.base import OffloadKey, ReqContext, get_offload_group_idx


class _KeyIndex:
    """A request's keys by (group, end-token position), extended as the request grows."""

    __slots__ = ("by_position", "seen")

    def __init__(self) -> None:
        self.by_position: dict[tuple[int, int], OffloadKey] = {}
        self.seen = 0

    def update(self, positions: Mapping[OffloadKey, int]) -> None:
        if len(positions) <= self.seen:
            return
        # The scheduler only adds keys (dicts keep insertion order): read the new ones.
        for key, position in itertools.islice(positions.items(), self.seen, None):
            self.by_position[(get_offload_group_idx(key), position)] = key
        self.seen = len(positions)


def chunk_tokens(offloading_spec: Any) -> dict[int, int]:
    """Tokens per chunk of each KV-cache group, as the scheduler counts positions."""
    config = offloading_spec.config
    per_chunk = config.cache.blocks_per_chunk
    return {i: g.tokens_per_block * per_chunk for i, g in enumerate(config.groups)}


def parents(
    keys: Sequence[OffloadKey], req_context: ReqContext, tokens: Mapping[int, int]
) -> dict[OffloadKey, OffloadKey]:
    """The parent of each of ``keys`` that can be told (see the module)."""
    known = [req_context.get_offload_key_position(k) for k in keys]
    if None in known:  # no positions: the order given is the chain's
        return {
            k: p
            for p, k in itertools.pairwise(keys)
            if get_offload_group_idx(p) == get_offload_group_idx(k)
        }
    index = _index(req_context)
    local = {(get_offload_group_idx(k), pos): k for k, pos in zip(keys, known)}
    out: dict[OffloadKey, OffloadKey] = {}
    for key, position in zip(keys, known):
        assert position is not None
        group = get_offload_group_idx(key)
        step = tokens.get(group)
        if step is None:
            continue
        where = (group, position - step)
        parent = local.get(where)
        if parent is None and index is not None:
            parent = index.by_position.get(where)
        if parent is not None:
            out[key] = parent
    return out


def _index(req_context: ReqContext) -> _KeyIndex | None:
    positions = getattr(req_context, "_offload_key_positions", None)
    if not isinstance(positions, dict):  # a vLLM that keeps them elsewhere: the job's own
        return None
    index: _KeyIndex | None = req_context.get_state(_KeyIndex)
    if index is None:
        index = _KeyIndex()
        req_context.set_state(index)
    index.update(positions)
    return index
