"""The tier's stores and transfers, wired: one client, every request metered and observed.

    awscrt/boto3 store -> MeteredStore (every request counted)
        -> Uploader (stores) and Renewer (copies: renewals)
        -> ObservingStore (HEAD/GET answers reach the UsageTracker)
            -> MeteredDownloader (loads)
            -> DeniedHeadIsAbsent -> Downloader (lookups, threads of their own)

Loads and lookups share one presence cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from s3kv.naming.keys import KeyStyle
from s3kv.naming.location import Location
from s3kv.naming.namespace import Namespace
from s3kv.settings import S3Settings
from s3kv.stores import Store, open_store
from s3kv.transfers.downloader import Downloader
from s3kv.transfers.lookup import PresenceCache
from s3kv.transfers.uploader import Uploader
from s3kv.vllm._lookup import LOOKUP_THREADS
from s3kv.vllm._metrics import MeteredDownloader, MeteredStore, TierMeter
from s3kv.vllm._stores import DeniedHeadIsAbsent
from s3kv.vllm._usage import ObservingStore, UsageTracker
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
    metered = MeteredStore(store, meter)
    presence = PresenceCache()
    usage = UsageTracker.create(
        metered,
        settings,
        presence,
        renew_after=renew_after,
        announce_removals=announce_removals,
    )
    observed = ObservingStore(metered, usage)
    common: dict[str, Any] = {"settings": settings, "style": style}
    return TierIO(
        store=store,
        uploader=Uploader(
            location,
            namespace,
            concurrency=2 * c,
            store=metered,
            vllm_version=_vllm_version(),  # recorded in the manifest it creates
            **common,
        ),
        downloader=MeteredDownloader(
            location,
            namespace,
            concurrency=c,
            meter=meter,
            presence_cache=presence,
            store=observed,
            **common,
        ),
        prober=Downloader(
            location,
            namespace,
            concurrency=lookup_threads,
            presence_cache=presence,
            store=DeniedHeadIsAbsent(observed),
            **common,
        ),
        usage=usage,
    )
