"""The tier's EngineCore-side store and transfers, wired: one client, one request hook.

    awscrt/boto3 store, its ``on_request`` hook -> TierMeter (requests, retries, size
        failures), UsageTracker (what each HEAD/GET answered) and the tier's own
        listeners (the store's health, the load model)
      -> Uploader (the manifest: written at start, create-only; a tenant's on first
         use) and Renewer (copies: renewals)
      -> LookupDownloader (lookups, threads of their own: a HEAD answered 403 is absent)

Loads and stores are not here: they run on the tier's data path
(:mod:`s3kv.worker.datapath`, in an I/O process or in-process), with a client of its
own; the requests it sends come back with each job's reply and go through the same
hook (:attr:`TierIO.on_request`), so every request the tier makes is counted, renewed
and judged in one place.

Each tenant gets its own uploader and prober (:class:`s3kv.vllm._tenants.TenantIO`: its
prefix, its manifest) on the same store, presence cache and thread pools: the base
location's transfers own the pools, a tenant's borrow them.

No store is wrapped: a request is measured where it is sent (:mod:`s3kv.stores.hooks`),
with the attempt its retry loop gave it. Lookups retry no longer than a request's wait
budget (``wait_seconds``): past it the request is recomputed anyway.

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


RENEWAL_CONNECTIONS = 4
"""Connections for renewals (copies) and the manifest's requests, beside the lookups'."""


def vllm_version() -> str | None:
    """The installed vLLM's version (recorded in the manifests the tier writes)."""
    found = installed_vllm()
    return found[1] if found is not None else None


@dataclass
class TierIO:
    store: Store
    """The store the client belongs to (closed last)."""
    uploader: Uploader
    prober: LookupDownloader
    """Lookups' downloader: its own threads, so HEADs never queue behind loads."""
    usage: UsageTracker
    tenants: Tenants
    """The base location's transfers (those above) and each tenant's, made on first use."""
    on_request: Callable[[RequestEvent], None]
    """The store's request hook: the data path's requests are told to it too."""


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
    # Lookups, renewals and the manifest's requests; loads and stores have the data
    # path's own client. ``max_connections`` caps each.
    connections = lookup_threads + RENEWAL_CONNECTIONS
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
        pools: dict[str, Any] = {"up": {}, "probe": {}}
        if base is not None:  # a tenant's borrow the base location's pools
            pools = {"up": {"executor": base.uploader.executor},
                     "probe": {"executor": base.prober.executor}}
        uploader = Uploader(
            where,
            namespace,
            concurrency=2 * c,
            vllm_version=vllm_version(),  # recorded in the manifest it creates
            settings=settings,
            **pools["up"],
            **common,
        )
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
        return TenantIO(tenant, uploader, prober, read_only=read_only)

    base = transfers(location)
    return TierIO(
        store=store,
        uploader=base.uploader,
        prober=base.prober,
        usage=usage,
        tenants=Tenants(base, lambda t: transfers(location.for_tenant(t), t, base)),
        on_request=on_request,
    )
