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

vLLM's lookup thread answers a step's requests one after another and posts them together,
so one request on a stalled store held every other. Here each request is answered on its
own, on :data:`REQUEST_THREADS` threads, and by its deadline (:mod:`s3kv.vllm._budget`):
what is unanswered then is MISS, and vLLM recomputes. While the store's breaker is open
(:mod:`s3kv.vllm._health`) a request is answered MISS without a request; hits whose load
would not end within the budget left are MISS too (:mod:`s3kv.vllm._cost`).

S3 answers a request for a missing key with 404 only to callers who may list the bucket;
others get 403. The reader and writer policies in ``terraform/`` grant ``s3:ListBucket``
held to the cache prefix, and Ceph RGW then answers 403 for every missing block (seen on
RGW 16; an unconditioned ``s3:ListBucket`` gives 404). The tier has read the manifest
under the same prefix with the same credentials before its first lookup, so a HEAD that
answers 403 there means "absent": :class:`LookupDownloader` says so, once in the log,
instead of failing the lookup batch (vLLM would log it and answer MISS for every key of
the batch, present ones included).

With tenants, each request's keys are looked up under its tenant's prefix (``route``,
the tier's :class:`~s3kv.vllm._tenants.TenantIO` of the request), and vLLM's cache of
verdicts, keyed by OffloadKey alone, is kept apart per tenant: the key this manager
files is the tenant's scope in front of the OffloadKey, so one tenant's HIT is never
another's answer, even for identical tokens.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from vllm.v1.kv_offload.base import OffloadKey, ReqContext, get_offload_group_idx
from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager

from s3kv.errors import AccessDeniedError, CustomerKeyError, TransferCancelledError
from s3kv.naming.keys import KeyMapper
from s3kv.retry import with_retries
from s3kv.stores import ObjectInfo
from s3kv.transfers.downloader import Downloader
from s3kv.transfers.lookup import LookupStats, fanout_for, prefix_length
from s3kv.vllm._budget import WaitBudget
from s3kv.vllm._cost import LoadCost
from s3kv.vllm._health import StoreHealth
from s3kv.vllm._logs import QuietLog
from s3kv.worker.deadlines import Deadlines

LOOKUP_THREADS = fanout_for(15_624)
"""Threads for lookup HEADs: a whole search round at once (24, the fanout of chains up to
15,624 blocks), so a round costs one round trip."""

REQUEST_THREADS = 8
"""Requests whose lookups run at once (each sends a search round's looks at once)."""

logger = logging.getLogger("s3kv.vllm")


class LookupDownloader(Downloader):
    """Lookups' downloader: a HEAD answered 403 is an absent key (logged once); with
    ``require_checksum``, a block stored without a checksum is absent (its load would be
    refused). The tier checked the manifest at start: a lookup never reads it."""

    _told = False
    _told_key = False
    require_checksum = False
    stop: Callable[[], bool] | None = None
    """True when looks must stop (the store's breaker opened): a look's retries end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.looks = 0
        """Presence requests sent (each a look at one key, its retries included)."""
        self._looks_lock = threading.Lock()

    def _check_manifest(self) -> None:
        """Checked once, by the tier, when it started."""

    def _present(self, object_key: str) -> bool:
        with self._looks_lock:
            self.looks += 1

        def look() -> ObjectInfo | None:
            if self.stop is not None and self.stop():
                raise TransferCancelledError("lookups stopped: the store's breaker is open")
            return self.store.head(object_key)

        try:
            info = with_retries(look, self.settings)
        except CustomerKeyError as exc:
            if not self._told_key:
                self._told_key = True
                logger.warning("s3kv lookups: %s; taken as absent (recomputed)", exc)
            return False
        except AccessDeniedError as exc:
            if not self._told:
                self._told = True
                logger.info(
                    "s3kv lookups: HEAD answered 403 (%s); the credentials may read but "
                    "not list this prefix, so S3 says 403 for missing keys: taken as absent",
                    exc,
                )
            return False
        if info is None:
            return False
        return not (self.require_checksum and info.checksum is None and not self.store.is_local)


class Route(Protocol):
    """Where one request's keys are looked up (the tier's ``TenantIO``)."""

    scope: bytes
    prober: LookupDownloader

    def ready(self) -> bool:
        """False: nothing is stored for it yet (every key absent, no request needed)."""


Hits = Callable[[Sequence[OffloadKey], KeyMapper], None]


@dataclass
class Guards:
    """What bounds a request's lookups: its budget, the store's health, the load model."""

    budget: WaitBudget
    deadlines: Deadlines
    health: StoreHealth | None = None
    cost: LoadCost | None = None
    block_bytes: int = 0
    quiet: QuietLog | None = None


class _Verdict:
    """One request's answers, posted once: the search's, or MISS at its deadline."""

    __slots__ = ("_entries", "_lock", "_posted", "_results")

    def __init__(self, results: Any, entries: list[tuple[OffloadKey, int]]) -> None:
        self._results, self._entries = results, entries
        self._lock = threading.Lock()
        self._posted = False

    @property
    def keys(self) -> int:
        return len(self._entries)

    def post(self, found: Sequence[bool] | None) -> bool:
        """Post ``found`` (None: all MISS); False if already posted."""
        with self._lock:
            if self._posted:
                return False
            self._posted = True
        answers = found if found is not None else [False] * len(self._entries)
        self._results.put([(k, g, bool(a)) for (k, g), a in zip(self._entries, answers)])
        return True


class S3AsyncLookupManager(AsyncLookupManager):  # type: ignore[misc]
    """One step's keys of a request, searched on a thread of the manager's pool.

    Answers the presence cache already holds (blocks this tier stored or loaded, HEADs
    of the last seconds) cost nothing and narrow the search. The counters below are
    running totals written under a lock by the threads that answer requests (the tier's
    metrics read ``heads_sent``, ``cache_answers``, ``skipped``); readers may see them a
    step late. ``guards`` (the tier's) bound each request by its budget; without them a
    request waits for its answers.
    """

    cache_answers: int
    """Keys answered from the presence cache, without a request."""
    inferred_answers: int
    """Keys answered by the search without a request of their own (present before the
    boundary, absent past it)."""
    searches: int
    """Chains searched (one per request and KV-cache group per batch)."""
    rounds: int
    """Round trips of concurrent HEADs, over all searches."""

    skipped: Counter[str]
    """Keys answered MISS without the store's verdict, by reason: ``breaker`` (open),
    ``budget`` (the request's wait budget ran out), ``slow_store`` (the load would not
    end within it)."""
    expired: int
    """Requests whose lookups ran out of their wait budget."""

    def __init__(
        self,
        downloader: LookupDownloader,
        tier_type: str,
        *,
        windowed_groups: Collection[int] = (),
        on_hits: Hits | None = None,
        guards: Guards | None = None,
        route: Callable[[ReqContext], Route] | None = None,
    ) -> None:
        self._downloader = downloader
        self._windowed_groups = frozenset(windowed_groups)
        self._on_hits = on_hits
        self._guards = guards
        self._route = route
        self._probers = {id(downloader): downloader}  # every tenant's, for heads_sent
        self._counting = threading.Lock()
        self.cache_answers = self.inferred_answers = 0
        self.searches = self.rounds = self.expired = 0
        self.skipped = Counter()
        self._pending: set[_Verdict] = set()  # guarded by _counting
        self._pool = ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="s3kv-lookups")
        super().__init__(tier_type=tier_type)  # starts the lookup thread: set state first

    @property
    def heads_sent(self) -> int:
        """Presence requests sent for lookups (every tenant's)."""
        return sum(p.looks for p in list(self._probers.values()))

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> bool | None:
        scope = self._route(req_context).scope if self._route is not None else b""
        found: bool | None = super().lookup(scope + key if scope else key, req_context)
        return found

    def _prober(self, req_context: ReqContext) -> tuple[LookupDownloader, Route | None]:
        """The request's prober (its tenant's), and its route."""
        if self._route is None:
            return self._downloader, None
        route = self._route(req_context)
        if id(route.prober) not in self._probers:
            self._probers[id(route.prober)] = route.prober
        return route.prober, route

    # -- vLLM's lookup thread -------------------------------------------------------------

    def _worker(self) -> None:
        # vLLM's own (AsyncLookupManager._worker) answers a step's requests in turn and
        # posts them together; its queues are the same in vLLM 0.32.0 and 0.33.0.
        while True:
            pending = self._lookup_queue.get()
            if pending is None:
                break
            requests: dict[str, tuple[ReqContext, list[tuple[OffloadKey, int]]]] = {}
            for key, req_context, generation in pending:
                requests.setdefault(req_context.req_id, (req_context, []))[1].append(
                    (key, generation)
                )
            for req_context, entries in requests.values():
                self._answer(req_context, entries)

    def _answer(self, req_context: ReqContext, entries: list[tuple[OffloadKey, int]]) -> None:
        """Start one request's lookups; its verdict is posted when found, or at its
        deadline (MISS), whichever comes first."""
        verdict = _Verdict(self._pending_results, entries)
        keys = [key for key, _ in entries]
        g = self._guards
        if g is None:
            self._pool.submit(self._run, verdict, keys, req_context)
            return
        if g.health is not None and g.health.is_open:
            self._skip("breaker", len(keys))
            verdict.post(None)
            return
        started = time.monotonic()
        deadline = g.budget.deadline(req_context.req_id)

        def expire() -> None:
            if verdict.post(None):
                self._skip("budget", len(keys))
                with self._counting:
                    self.expired += 1
                if g.health is not None:
                    g.health.failure("a lookup ran out of its wait budget", started=started)

        if deadline <= started:
            expire()
            return
        g.deadlines.at(deadline, expire)
        with self._counting:
            self._pending.add(verdict)
        self._pool.submit(self._run, verdict, keys, req_context)

    def answer_pending(self, reason: str) -> None:
        """Answer MISS now to every request still waiting for its lookups (the store
        stopped answering: the breaker opened)."""
        with self._counting:
            pending, self._pending = self._pending, set()
        for verdict in pending:
            if verdict.post(None):
                self._skip(reason, verdict.keys)

    def _run(self, verdict: _Verdict, keys: list[OffloadKey], req_context: ReqContext) -> None:
        try:
            found = list(self.batch_lookup(keys, req_context))
        except Exception as exc:  # vLLM's worker would log it and answer MISS
            # said only when it decides the answer: not past the deadline, nor when the
            # breaker stopped the looks (each is counted, and the breaker said so)
            if verdict.post(None) and not isinstance(exc, TransferCancelledError):
                quiet = self._guards.quiet if self._guards is not None else None
                say = quiet.warning if quiet is not None else _warning
                say("lookup", "s3kv lookups failed for %d keys: %s", len(keys), exc)
        else:
            verdict.post(found)
        with self._counting:
            self._pending.discard(verdict)

    def _skip(self, reason: str, n: int) -> None:
        with self._counting:
            self.skipped[reason] += n

    # -- the search -----------------------------------------------------------------------

    def batch_lookup(self, keys: list[OffloadKey], req_context: ReqContext) -> Iterable[bool]:
        down, route = self._prober(req_context)
        if route is not None:
            if route.scope:
                keys = [k[len(route.scope) :] for k in keys]
            if not route.ready():
                return [False] * len(keys)
        answers: list[bool] = [False] * len(keys)
        by_chain = []
        for group, chain in chains(keys, req_context).items():
            chain_keys = [keys[i] for i in chain]
            if group in self._windowed_groups:
                found = self._probe_each(down, chain_keys)
            else:
                found = self._search(down, chain_keys)
            for i, present in zip(chain, found):
                answers[i] = present
            by_chain.append((chain_keys, found))
        hits = sum(answers)
        g = self._guards
        if hits and g is not None and g.cost is not None and g.block_bytes:
            left = g.budget.left(req_context.req_id)
            if not g.cost.pays(hits * g.block_bytes, left):
                self._skip("slow_store", hits)
                return [False] * len(keys)
        if self._on_hits is not None:  # last use reaches S3 (renewal; never blocks)
            for chain_keys, found in by_chain:
                self._on_hits([k for k, present in zip(chain_keys, found) if present], down.keys)
        return answers

    def shutdown(self) -> None:
        super().shutdown()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def mark_miss(
        self, keys: Collection[OffloadKey], *, absent: Collection[OffloadKey] | None = None,
        req_context: ReqContext | None = None,
    ) -> None:
        """After a failed load: vLLM's verdict for this request; and ours for the next
        about ``absent`` (default: all of ``keys``), which the presence cache holds
        absent a while. ``req_context``: the request's, for its tenant's keys."""
        down, route = (self._downloader, None) if req_context is None else self._prober(
            req_context)
        scope = route.scope if route is not None else b""
        super().mark_miss([scope + k for k in keys] if scope else keys)
        presence, mapper = down.presence, down.keys
        for key in keys if absent is None else absent:
            presence.put(mapper.key_for(key), False)

    def _probe_each(self, down: Downloader, keys: Sequence[OffloadKey]) -> list[bool]:
        known = [down.presence.get(down.keys.key_for(k)) for k in keys]
        unknown = [i for i, a in enumerate(known) if a is None]
        with self._counting:
            self.cache_answers += len(keys) - len(unknown)
        if unknown:
            for i, present in zip(unknown, down.contains([keys[i] for i in unknown])):
                known[i] = present
        return [bool(a) for a in known]

    def _search(self, down: Downloader, chain: Sequence[OffloadKey]) -> list[bool]:
        """Presence of a chain's keys: probed or cached where known, else by the boundary."""
        object_keys = [down.keys.key_for(k) for k in chain]
        known: list[bool | None] = [down.presence.get(k) for k in object_keys]
        n = len(chain)
        with self._counting:
            self.cache_answers += n - known.count(None)
        absent_from = next((i for i, a in enumerate(known) if a is False), n)
        present_below = next((i for i in range(absent_from - 1, -1, -1) if known[i]), -1)

        def probe(positions: Sequence[int]) -> Sequence[bool]:
            unknown = [p for p in positions if known[p] is None]
            if unknown:  # concurrent looks
                for p, present in zip(unknown, down.contains([chain[p] for p in unknown])):
                    known[p] = present
            return [bool(known[p]) for p in positions]

        stats = LookupStats()
        boundary = prefix_length(
            n, probe, stats=stats, present_below=present_below, absent_from=absent_from
        )
        with self._counting:
            self.searches += 1
            self.rounds += stats.rounds
            self.inferred_answers += known.count(None)
        return [i < boundary if a is None else a for i, a in enumerate(known)]


def _warning(kind: str, message: str, *args: object) -> None:
    logger.warning(message, *args)


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
