"""The tier's stores and transfers, wired: one client, every request reported to one hook.

    awscrt/boto3 store, its ``on_request`` hook -> TierMeter (requests, retries, size
        failures), UsageTracker (what each HEAD/GET answered) and the tier's own
        listeners (the store's health, the load model)
      -> Uploader (stores; the manifest re-checked beside the dispatch thread; damaged
         copies replaced) and Renewer (copies: renewals)
      -> MeteredDownloader (loads: counts checksum failures, remembers damaged copies)
      -> LookupDownloader (lookups, threads of their own: a HEAD answered 403 is absent)

Each tenant gets those three transfers of its own (:class:`s3kv.vllm._tenants.TenantIO`:
its prefix, its manifest) on the same store, presence cache and thread pools: the
base location's transfers own the pools, a tenant's borrow them.

No store is wrapped: a request is measured where it is sent (:mod:`s3kv.stores.hooks`),
with the attempt its retry loop gave it. Loads and lookups share one presence cache, and
retry no longer than a request's wait budget (``wait_seconds``): past it the request is
recomputed anyway.

The tier's requests wait less than the library's by default (:data:`TIER_TIMEOUTS`, unless
the tier entry or the environment sets them): a request stuck on a stalled store holds a
connection and a thread until then, and the tier's probe and lookups need them back soon
after the store returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from s3kv.naming.keys import KeyStyle
from s3kv.naming.location import Location
from s3kv.naming.namespace import Namespace
from s3kv.settings import S3Settings
from s3kv.stores import Store, open_store
from s3kv.stores.base import RequestEvent
from s3kv.transfers.lookup import PresenceCache
from s3kv.transfers.uploader import Uploader
from s3kv.vllm._loads import MeteredDownloader
from s3kv.vllm._lookup import LOOKUP_THREADS, LookupDownloader
from s3kv.vllm._metrics import TierMeter
from s3kv.vllm._tenants import TenantIO, Tenants
from s3kv.vllm._usage import UsageTracker
from s3kv.vllm._version import installed_vllm

TIER_TIMEOUTS = {"connect_timeout_seconds": 2.0, "read_timeout_seconds": 5.0}
"""The tier's connect and read timeouts unless set: a healthy store answers a look in
tens of milliseconds (Ceph RGW here: 0.05 s median, 0.19 s the slowest of 200, the
machine busy with an engine), and a block's bytes never stop for seconds."""


def tier_settings(settings: S3Settings) -> S3Settings:
    """``settings`` with the tier's timeouts where neither the entry nor the environment
    set them."""
    unset = {k: v for k, v in TIER_TIMEOUTS.items() if k not in settings.model_fields_set}
    return settings.model_copy(update=unset) if unset else settings


def _vllm_version() -> str | None:
    found = installed_vllm()
    return found[1] if found is not None else None


@dataclass
class TierIO:
    store: Store
    """The store the client belongs to (closed last)."""
    uploader: Uploader
    downloader: MeteredDownloader
    prober: LookupDownloader
    """Lookups' downloader: its own threads, so HEADs never queue behind loads."""
    usage: UsageTracker
    tenants: Tenants
    """The base location's transfers (those above) and each tenant's, made on first use."""


def open_tier_io(
    location: Location,
    namespace: Namespace,
    settings: S3Settings,
    meter: TierMeter,
    *,
    style: KeyStyle,
    renew_after: float | None,
    announce_removals: bool,
    wait_seconds: float,
    require_checksum: bool = False,
    listeners: Sequence[Callable[[RequestEvent], None]] = (),
    read_only: bool = False,
) -> TierIO:
    c = settings.concurrency
    lookup_threads = max(LOOKUP_THREADS, c // 4)
    # One client for stores, loads, lookups and renewals; its pool holds all their requests.
    # A store job keeps up to 2c blocks in flight (on a link with first-byte latency, a
    # prompt's many small blocks are stored that much sooner); a load job of large blocks
    # fills the pool with ranged parts (Store.plan_loads). ``max_connections`` caps it.
    connections = 2 * c + lookup_threads
    if settings.max_connections is not None:
        connections = min(connections, settings.max_connections)
    pool = settings.model_copy(update={"concurrency": connections})
    store = open_store(location, pool)
    presence = PresenceCache()
    usage = UsageTracker.create(
        store,
        settings,
        presence,
        renew_after=renew_after,
        announce_removals=announce_removals,
    )

    def on_request(event: RequestEvent) -> None:
        meter.on_request(event)
        usage.on_request(event)
        for listener in listeners:
            listener(event)

    store.on_request = on_request  # before the first request: the manifest's
    common: dict[str, Any] = {"style": style, "store": store}
    waiting = settings.model_copy(update={"deadline_seconds": wait_seconds})

    def transfers(where: Location, tenant: str | None = None,
                  base: TenantIO | None = None) -> TenantIO:
        pools: dict[str, Any] = {"up": {}, "down": {}, "probe": {}}
        if base is not None:  # a tenant's borrow the base location's pools
            pools = {"up": {"executor": base.uploader.executor},
                     "down": {"executor": base.downloader.executor},
                     "probe": {"executor": base.prober.executor}}
        uploader = Uploader(
            where,
            namespace,
            concurrency=2 * c,
            vllm_version=_vllm_version(),  # recorded in the manifest it creates
            settings=settings,
            **pools["up"],
            **common,
        )
        uploader.recheck_beside = True  # never a request on the dispatch thread
        prober = LookupDownloader(
            where,
            namespace,
            concurrency=lookup_threads,
            presence_cache=presence,
            settings=waiting,
            **pools["probe"],
            **common,
        )
        prober.require_checksum = require_checksum
        downloader = MeteredDownloader(
            where,
            namespace,
            concurrency=c,
            meter=meter,
            presence_cache=presence,
            damaged=uploader.damaged,
            require_checksum=require_checksum,
            settings=waiting,
            **pools["down"],
            **common,
        )
        return TenantIO(tenant, uploader, downloader, prober, read_only=read_only)

    base = transfers(location)
    downloader, prober = base.downloader, base.prober
    assert isinstance(downloader, MeteredDownloader) and isinstance(prober, LookupDownloader)
    return TierIO(
        store=store,
        uploader=base.uploader,
        downloader=downloader,
        prober=prober,
        usage=usage,
        tenants=Tenants(base, lambda t: transfers(location.for_tenant(t), t, base)),
    )
