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
from collections.abc import Callable
from dataclasses import dataclass

from vllm.v1.kv_offload.base import ReqContext

from s3kv.errors import CustomerKeyError, InvalidTenantError, ManifestMissingError
from s3kv.naming.keys import KeyMapper
from s3kv.naming.tenants import TENANT_FIELD, check_tenant
from s3kv.transfers.downloader import Downloader
from s3kv.transfers.uploader import Uploader
from s3kv.vllm._lookup import LookupDownloader

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
    """One tenant's transfers: its keys, its manifest, on the tier's store and pools."""

    def __init__(
        self, tenant: str | None, uploader: Uploader, downloader: Downloader,
        prober: LookupDownloader, *, read_only: bool,
    ) -> None:
        self.tenant = tenant
        self.uploader, self.downloader, self.prober = uploader, downloader, prober
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
        for transfer in (self.prober, self.downloader, self.uploader):
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
