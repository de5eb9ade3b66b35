"""The tier's stores and transfers, wired: one client, every request reported to one hook.

    awscrt/boto3 store, its ``on_request`` hook -> TierMeter (requests, retries, size
        failures) and UsageTracker (what each HEAD/GET answered)
      -> Uploader (stores) and Renewer (copies: renewals)
      -> MeteredDownloader (loads: counts checksum failures)
      -> LookupDownloader (lookups, threads of their own: a HEAD answered 403 is absent)

No store is wrapped: a request is measured where it is sent (:mod:`s3kv.stores.hooks`),
with the attempt its retry loop gave it. Loads and lookups share one presence cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from s3kv.naming.keys import KeyStyle
from s3kv.naming.location import Location
from s3kv.naming.namespace import Namespace
from s3kv.settings import S3Settings
from s3kv.stores import Store, open_store
from s3kv.stores.base import RequestEvent
from s3kv.transfers.downloader import Downloader
from s3kv.transfers.lookup import PresenceCache
from s3kv.transfers.uploader import Uploader
from s3kv.vllm._lookup import LOOKUP_THREADS, LookupDownloader
from s3kv.vllm._metrics import MeteredDownloader, TierMeter
from s3kv.vllm._usage import UsageTracker
from s3kv.vllm._version import installed_vllm


def _vllm_version() -> str | None:
    found = installed_vllm()
    return found[1] if found is not None else None


@dataclass
class TierIO:
    store: Store
    """The store the client belongs to (closed last)."""
    uploader: Uploader
    downloader: MeteredDownloader
    prober: Downloader
    """Lookups' downloader: its own threads, so HEADs never queue behind loads."""
    usage: UsageTracker


def open_tier_io(
    location: Location,
    namespace: Namespace,
    settings: S3Settings,
    meter: TierMeter,
    *,
    style: KeyStyle,
    renew_after: float | None,
    announce_removals: bool,
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

    store.on_request = on_request  # before the first request: the manifest's
    common: dict[str, Any] = {"settings": settings, "style": style, "store": store}
    return TierIO(
        store=store,
        uploader=Uploader(
            location,
            namespace,
            concurrency=2 * c,
            vllm_version=_vllm_version(),  # recorded in the manifest it creates
            **common,
        ),
        downloader=MeteredDownloader(
            location,
            namespace,
            concurrency=c,
            meter=meter,
            presence_cache=presence,
            **common,
        ),
        prober=LookupDownloader(
            location,
            namespace,
            concurrency=lookup_threads,
            presence_cache=presence,
            **common,
        ),
        usage=usage,
    )
