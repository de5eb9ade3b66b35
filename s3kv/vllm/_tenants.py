"""Tenants of the tier: whose each request is, and that tenant's transfers.

A router names a request's tenant in its ``kv_transfer_params["s3kv_tenant"]``; vLLM
hands those to the tier in the request's ``ReqContext``. The tier reads the field once per
request (:meth:`TenantPolicy.of`, kept with ``ReqContext.set_state``) and checks it
(:func:`s3kv.naming.tenants.check_tenant`): a tenant's lookups, loads and stores touch
only ``<prefix>/tenants/<tenant>/``, each request's through its tenant's own
:class:`TenantIO` (its key mapper and manifest; the store, its connections and the
thread pools are shared). A request whose field breaks the rule is not offloaded (no
lookup, no load, no store) and the refusal is logged; so is one without a tenant when the
tier requires one (``require_tenant``, or an ``sse_c_secret_file``: nothing is stored in
the clear once encryption was asked for), unless ``default_tenant`` names whose it is.
Without tenants (no field, no option) the tier works as it always did, under the
location's own prefix.

The field is trusted as given: vLLM passes ``kv_transfer_params`` from the API request,
so only a router that sets it (and overwrites what a client sent) keeps tenants apart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vllm.v1.kv_offload.base import ReqContext
from vllm.v1.kv_offload.tiering.base import RequestOffloadingContext, TransferJob

from s3kv.errors import CustomerKeyError, InvalidTenantError, ManifestMissingError
from s3kv.naming.keys import KeyMapper
from s3kv.naming.tenants import TENANT_FIELD, check_tenant
from s3kv.report import TransferReport
from s3kv.transfers.uploader import Uploader
from s3kv.vllm._lookup import LookupDownloader
from s3kv.vllm._readonly import check_manifest
from s3kv.vllm._tenant_metrics import TenantMeter

logger = logging.getLogger("s3kv.vllm")

REFUSALS_LOGGED = 20
"""Refused tenant fields logged one by one; later ones are counted only (the metric)."""

_SOURCE = f'kv_transfer_params["{TENANT_FIELD}"]'

LOCKED_OUT_SECONDS = 60.0
"""How long a tenant whose manifest answered with another key (a rotated secret) is not
offloaded before the tier looks again."""


@dataclass(frozen=True, slots=True)
class RequestTenant:
    """Whose a request is, as the tier read it once."""

    tenant: str | None
    """The tenant; None: the location's own prefix (a tier without tenants)."""
    refused: str = ""
    """Why the request is not offloaded: ``invalid_tenant`` or ``no_tenant`` ("": it is)."""


class TenantPolicy:
    """The tier's rule for requests: their tenant field, ``default_tenant``, ``require_tenant``."""

    def __init__(self, *, default_tenant: str | None, require_tenant: bool) -> None:
        if default_tenant is not None:
            default_tenant = check_tenant(default_tenant, source="default_tenant")
        self.default_tenant = default_tenant
        self.require_tenant = require_tenant
        self.refusals = 0
        self._lock = threading.Lock()

    def of(self, req_context: ReqContext) -> RequestTenant:
        found: RequestTenant | None = req_context.get_state(RequestTenant)
        if found is None:
            found = self._read(req_context)
            req_context.set_state(found)
        return found

    def _read(self, req_context: ReqContext) -> RequestTenant:
        params = req_context.kv_transfer_params
        value = params.get(TENANT_FIELD) if isinstance(params, dict) else None
        if value is None:
            if self.default_tenant is not None:
                return RequestTenant(self.default_tenant)
            return RequestTenant(None, "no_tenant" if self.require_tenant else "")
        try:
            return RequestTenant(check_tenant(value, source=_SOURCE))
        except InvalidTenantError as exc:
            with self._lock:
                self.refusals += 1
                told = self.refusals <= REFUSALS_LOGGED
            if told:
                logger.warning(
                    "s3kv tier: request %s is not offloaded: %s%s", req_context.req_id, exc,
                    "" if self.refusals < REFUSALS_LOGGED else " (later refusals: metrics only)",
                )
            return RequestTenant(None, "invalid_tenant")


class TenantIO:
    """One tenant's side in EngineCore: its keys, its manifest, its lookups, on the
    tier's store and pools (its loads and stores run on the data path, by its name)."""

    def __init__(
        self, tenant: str | None, uploader: Uploader, prober: LookupDownloader, *,
        read_only: bool,
    ) -> None:
        self.tenant = tenant
        self.uploader, self.prober = uploader, prober
        self.read_only = read_only
        self._locked_until = 0.0
        self._told = False
        self._found = False
        self.scope = b"" if tenant is None else tenant.encode("ascii") + b"\x00"
        """What keeps vLLM's lookup state of one tenant's key apart from another's (the
        lookup manager keys its cache by OffloadKey alone)."""

    @property
    def keys(self) -> KeyMapper:
        return self.uploader.keys

    def known_present(self, keys: Sequence[bytes]) -> frozenset[bytes]:
        """Keys the tier knows stored (stored, loaded or found by it) and not damaged:
        vLLM asks to store what it recomputed after a failed or skipped load, and their
        bytes need not cross a slow link again to be refused as present."""
        mapper, presence = self.keys, self.prober.presence
        damaged = self.uploader.damaged
        return frozenset(
            k for k in keys
            if presence.get(object_key := mapper.key_for(k)) is True and object_key not in damaged
        )  # fmt: skip

    def ready(self) -> bool:
        """Before a lookup: the namespace's manifest is there (a writer creates it, as a
        tier without tenants does at start); False when a reader finds none (nothing of
        this tenant is stored: every key is absent). Looked for until found once; the
        location's own (no tenant) was at start."""
        if self._found or self.tenant is None:
            return True
        if self.locked_out():
            return False
        try:
            if not self.read_only:
                self.uploader.ensure_manifest()
            else:
                self.prober.verify_manifest()
        except ManifestMissingError:
            return False
        except CustomerKeyError as exc:
            self._locked_until = time.monotonic() + LOCKED_OUT_SECONDS
            if not self._told:
                self._told = True
                logger.warning(
                    "s3kv tier: tenant %s is not offloaded: %s. After a secret rotation, "
                    "remove what the old secret wrote: s3kv rm --tenant %s (docs/tenants.md)",
                    self.tenant, exc, self.tenant,
                )
            return False
        self._found = True
        return True

    def locked_out(self) -> bool:
        """Its manifest answered with another key in the last minute: no transfer is
        started for it (each would fail the same way)."""
        return time.monotonic() < self._locked_until

    def close(self) -> None:
        for transfer in (self.prober, self.uploader):
            transfer.close(wait=False)


class Tenants:
    """Every tenant's :class:`TenantIO`, made on first use (no I/O: a manifest is
    looked for by the first lookup or store)."""

    def __init__(self, base: TenantIO, make: Callable[[str], TenantIO]) -> None:
        self.base = base
        self._make = make
        self._known: dict[str, TenantIO] = {}
        self._lock = threading.Lock()
        self.on_new: Callable[[TenantIO], None] | None = None
        """Called with each tenant's transfers once made (the tier's hooks on them)."""

    def io(self, tenant: str | None) -> TenantIO:
        if tenant is None:
            return self.base
        found = self._known.get(tenant)
        if found is None:
            with self._lock:
                found = self._known.get(tenant)
                if found is None:
                    found = self._make(tenant)
                    if self.on_new is not None:
                        self.on_new(found)
                    self._known[tenant] = found
        return found

    def close(self) -> None:
        """Close every tenant's transfers; the base's (which own the pools) go last."""
        with self._lock:
            known, self._known = list(self._known.values()), {}
        for io in known:
            io.close()
        self.base.close()


class TenantRouting:
    """The tier's side of tenants, a mixin of :class:`s3kv.vllm.S3TierManager`: each
    request's transfers, read from its tenant once, and the hooks the tier puts on a
    tenant's transfers when they are made."""

    tenancy: TenantPolicy
    tenants: Tenants
    tenant_metrics: TenantMeter
    health: Any
    metrics: Any
    settings: Any

    def _open_tenants(
        self, tenants: Tenants, policy: TenantPolicy, *, read_only: bool, tier_type: str
    ) -> None:
        """Hook every tenant's transfers; check (or write) at start the manifest of where
        requests without a tenant go, as a tier without tenants always has: a store that
        cannot be reached fails engine start."""
        self.tenants, self.tenancy = tenants, policy
        self.tenant_metrics = TenantMeter(self.metrics)
        tenants.on_new = self._hook
        self._hook(tenants.base)
        if self.tenancy.default_tenant is None and self.tenancy.require_tenant:
            return  # every request names its tenant: their manifests, on first use
        first = tenants.io(self.tenancy.default_tenant)
        if read_only:
            check_manifest(first.prober, tier_type=tier_type)
        else:
            first.uploader.ensure_manifest()

    def _hook(self, io: TenantIO) -> None:
        """The tier's hooks on a tenant's transfers (the base location's too)."""
        io.prober.stop = lambda: self.health.is_open

    def _tenancy_text(self, url: str) -> str:
        """The start-up log line's words on tenants and their keys."""
        policy = self.tenancy
        if policy.default_tenant is not None:
            text = f"; tenants under {url}/tenants/, default tenant {policy.default_tenant}"
        elif policy.require_tenant:
            text = f"; tenants under {url}/tenants/, requests naming none not offloaded"
        else:
            text = ""
        if self.settings.sse_c_secret_file is not None:
            text += "; each tenant's objects encrypted with its own key (SSE-C)"
        return text

    def _io(self, req_context: ReqContext) -> TenantIO | None:
        """The transfers of the request's tenant; None: the request is not offloaded."""
        who = self.tenancy.of(req_context)
        if who.refused:
            return None
        io = self.tenants.io(who.tenant)
        return None if io.locked_out() else io

    def _route(self, req_context: ReqContext) -> TenantIO:
        return self.tenants.io(self.tenancy.of(req_context).tenant)

    def _count_tenant(self, job: TransferJob, report: TransferReport | None) -> None:
        """A finished job, in its tenant's metrics."""
        tenant = self.tenancy.of(job.req_context).tenant
        self.tenant_metrics.on_job(tenant, is_load=job.is_promotion, report=report)

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        who = self.tenancy.of(req_context)  # read once, kept in the request's context
        if who.refused:
            self.tenant_metrics.not_offloaded(who.refused)
        return RequestOffloadingContext()
