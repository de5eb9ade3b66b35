"""Non-blocking lookups: vLLM's AsyncLookupManager answered by a prefix search.

vLLM's scheduler (``_maximal_prefix_lookup`` in ``offloading/scheduler.py``) keeps
calling ``lookup`` past RETRY answers, so a new prompt's whole chain reaches
``batch_lookup`` at once, one call per request, in chain order. A chain's HITs are handed
to ``on_hits`` (the tier's renewal of used blocks). Presence along a chain
is a prefix, so :func:`s3kv.transfers.lookup.prefix_length` finds its end in at most 3 round trips
(2,048 keys: at most 38 HEADs) and the other keys are answered without a request: those
before the boundary present, those past it absent. The scheduler stops at the first
MISS, so only the boundary matters to it. Sliding-window groups are the exception: vLLM
may free (and so never store) their chunks outside the window, so their keys are not a
prefix and each unknown one is HEADed.

A key claimed present that is not (a hole in the chain) fails only its own load; the
tier then calls :meth:`mark_miss`, which also remembers it absent in the presence cache,
so the next request's search stops there instead of claiming it again.

S3 answers a request for a missing key with 404 only to callers who may list the bucket;
others get 403. The reader and writer policies in ``terraform/`` grant ``s3:ListBucket``
held to the cache prefix, and Ceph RGW then answers 403 for every missing block (seen on
RGW 16; an unconditioned ``s3:ListBucket`` gives 404). The tier has read the manifest
under the same prefix with the same credentials before its first lookup, so a HEAD that
answers 403 there means "absent": :class:`LookupDownloader` says so, once in the log,
instead of failing the lookup batch (vLLM would log it and answer MISS for every key of
the batch, present ones included).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence

from vllm.v1.kv_offload.base import OffloadKey, ReqContext, get_offload_group_idx
from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager

from s3kv.errors import AccessDeniedError
from s3kv.transfers.downloader import Downloader
from s3kv.transfers.lookup import LookupStats, fanout_for, prefix_length

LOOKUP_THREADS = fanout_for(15_624)
"""Threads for lookup HEADs: a whole search round at once (24, the fanout of chains up to
15,624 blocks), so a round costs one round trip."""

logger = logging.getLogger("s3kv.vllm")


class LookupDownloader(Downloader):
    """Lookups' downloader: a HEAD answered 403 is an absent key (logged once)."""

    _told = False

    def _present(self, object_key: str) -> bool:
        try:
            return super()._present(object_key)
        except AccessDeniedError as exc:
            if not self._told:
                self._told = True
                logger.info(
                    "s3kv lookups: HEAD answered 403 (%s); the credentials may read but "
                    "not list this prefix, so S3 says 403 for missing keys: taken as absent",
                    exc,
                )
            return False


class S3AsyncLookupManager(AsyncLookupManager):  # type: ignore[misc]
    """One step's keys of a request, searched on vLLM's lookup thread.

    Answers the presence cache already holds (blocks this tier stored or loaded, HEADs
    of the last seconds) cost nothing and narrow the search. The counters below are
    running totals written by the lookup thread only (the tier's metrics read
    ``heads_sent`` and ``cache_answers``); readers may see them a step late.
    """

    heads_sent: int
    """HEAD requests sent for lookups."""
    cache_answers: int
    """Keys answered from the presence cache, without a request."""
    inferred_answers: int
    """Keys answered by the search without a request of their own (present before the
    boundary, absent past it)."""
    searches: int
    """Chains searched (one per request and KV-cache group per batch)."""
    rounds: int
    """Round trips of concurrent HEADs, over all searches."""

    def __init__(
        self,
        downloader: Downloader,
        tier_type: str,
        *,
        windowed_groups: Collection[int] = (),
        on_hits: Callable[[Sequence[OffloadKey]], None] | None = None,
    ) -> None:
        self._downloader = downloader
        self._windowed_groups = frozenset(windowed_groups)
        self._on_hits = on_hits
        self.heads_sent = self.cache_answers = self.inferred_answers = 0
        self.searches = self.rounds = 0
        super().__init__(tier_type=tier_type)  # starts the lookup thread: set state first

    def batch_lookup(self, keys: list[OffloadKey], req_context: ReqContext) -> Iterable[bool]:
        # An exception here makes vLLM log it and answer MISS for the whole batch.
        answers: list[bool] = [False] * len(keys)
        for group, chain in chains(keys, req_context).items():
            chain_keys = [keys[i] for i in chain]
            if group in self._windowed_groups:
                found = self._probe_each(chain_keys)
            else:
                found = self._search(chain_keys)
            for i, present in zip(chain, found):
                answers[i] = present
            if self._on_hits is not None:  # last use reaches S3 (renewal; never blocks)
                self._on_hits([k for k, present in zip(chain_keys, found) if present])
        return answers

    def mark_miss(self, keys: Collection[OffloadKey]) -> None:
        """After a failed load: vLLM's verdict for this request, and ours for the next."""
        super().mark_miss(keys)
        presence, mapper = self._downloader.presence, self._downloader.keys
        for key in keys:
            presence.put(mapper.key_for(key), False)

    def _probe_each(self, keys: Sequence[OffloadKey]) -> list[bool]:
        down = self._downloader
        known = [down.presence.get(down.keys.key_for(k)) for k in keys]
        unknown = [i for i, a in enumerate(known) if a is None]
        self.cache_answers += len(keys) - len(unknown)
        if unknown:
            sent_before = down._requests
            for i, present in zip(unknown, down.contains([keys[i] for i in unknown])):
                known[i] = present
            self.heads_sent += down._requests - sent_before
        return [bool(a) for a in known]

    def _search(self, chain: Sequence[OffloadKey]) -> list[bool]:
        """Presence of a chain's keys: probed or cached where known, else by the boundary."""
        down = self._downloader
        object_keys = [down.keys.key_for(k) for k in chain]
        known: list[bool | None] = [down.presence.get(k) for k in object_keys]
        n = len(chain)
        self.cache_answers += n - known.count(None)
        absent_from = next((i for i, a in enumerate(known) if a is False), n)
        present_below = next((i for i in range(absent_from - 1, -1, -1) if known[i]), -1)

        def probe(positions: Sequence[int]) -> Sequence[bool]:
            unknown = [p for p in positions if known[p] is None]
            if unknown:
                # contains() checks the manifest once, then HEADs concurrently.
                sent_before = down._requests
                for p, present in zip(unknown, down.contains([chain[p] for p in unknown])):
                    known[p] = present
                self.heads_sent += down._requests - sent_before
            return [bool(known[p]) for p in positions]

        stats = LookupStats()
        boundary = prefix_length(
            n, probe, stats=stats, present_below=present_below, absent_from=absent_from
        )
        self.searches += 1
        self.rounds += stats.rounds
        self.inferred_answers += known.count(None)
        return [i < boundary if a is None else a for i, a in enumerate(known)]


def chains(keys: Sequence[OffloadKey], req_context: ReqContext) -> dict[int, list[int]]:
    """Indices of ``keys`` per KV-cache group, each in chain order.

    The scheduler records each key's end-token position in the request's context; a
    sliding-window group looks its keys up from the end, so order by position when every
    key has one, else keep the order given (already the chain's).
    """
    groups: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(get_offload_group_idx(key), []).append(i)
    for group, indices in groups.items():
        positions = [req_context.get_offload_key_position(keys[i]) for i in indices]
        if None not in positions:
            groups[group] = [i for _, i in sorted(zip(positions, indices))]
    return groups
