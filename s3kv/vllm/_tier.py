"""``S3TierManager``: vLLM 0.33.0's ``SecondaryTierManager`` over s3kv.

Keys are the filesystem tier's (``FileMapper`` with ``blocks_per_file =
blocks_per_chunk`` and ``parallel_agnostic=True``) under the URL's prefix, so a cache
pushed from vLLM's ``fs`` tier is found here and a cache pulled from here is found by
it. vLLM's object-store tier (``ObjectStoreSecondaryTierManager``) stores the same keys,
so this tier and that one read each other's blocks; ``style="vllm-obj"`` is accepted as
an alias of the default ``"s3kv"``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadingEvent,
    OffloadKey,
    ReqContext,
)
from vllm.v1.kv_offload.tiering.backpressure import BackpressureDetector
from vllm.v1.kv_offload.tiering.base import (
    JobResult,
    ScheduleEndContext,
    SecondaryTierManager,
    TransferJob,
)

from s3kv.errors import InvalidInputError
from s3kv.naming.keys import KeyMapper, KeyStyle
from s3kv.naming.location import parse_location
from s3kv.ops.gc.renewal import DEFAULT_RENEW_AFTER_SECONDS
from s3kv.report import TransferReport
from s3kv.settings import S3Settings
from s3kv.transfers.uploader import Uploader
from s3kv.vllm._budget import DEFAULT_WAIT_BUDGET_SECONDS, WaitBudget, parse_budget
from s3kv.vllm._chain import chunk_tokens, parents
from s3kv.vllm._cost import LoadCost
from s3kv.vllm._health import BREAKER_FAILURES, Change, StoreHealth, announce, parse_failures
from s3kv.vllm._io_process import open_io
from s3kv.vllm._loads import LoadNotes
from s3kv.vllm._logs import QuietLog
from s3kv.vllm._lookup import Guards, S3AsyncLookupManager, chains
from s3kv.vllm._metrics import (
    BREAKER_OPENINGS,
    BUDGET_EXPIRED,
    DROPPED_STORE_BLOCKS,
    HEALED_BLOCKS,
    REMOVED_BLOCKS,
    RENEWALS,
    RETAGS,
    SKIPPED_LOOKUPS,
    SKIPPED_STORE_BLOCKS,
    TierMeter,
    metric_definitions,
    tier_label,
)
from s3kv.vllm._readonly import StoreGate
from s3kv.vllm._runner import Finished, JobRunner
from s3kv.vllm._selfcheck import tier_namespace
from s3kv.vllm._tenant_metrics import tenant_metric_definitions
from s3kv.vllm._tenants import TenantPolicy, TenantRouting
from s3kv.vllm._usage import parse_renew_after
from s3kv.vllm._version import warn_if_untested
from s3kv.vllm._wiring import open_tier_io, tier_settings, vllm_version
from s3kv.worker.deadlines import Deadlines
from s3kv.worker.orders import PathConfig

if TYPE_CHECKING:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
        OffloadingConnectorStats,
    )
    from vllm.v1.kv_offload.base import OffloadingMetricMetadata, OffloadingSpec

logger = logging.getLogger("s3kv.vllm")

SHUTDOWN_TIMEOUT_SECONDS = 30.0
"""How long ``shutdown`` waits for cancelled jobs' last requests before it closes."""

PROBE_NAME = "s3kv-health-probe"
"""The key, in the namespace's folder, an open breaker looks at: no object is ever
there, and any answer (found or not) is the store answering."""


class S3TierManager(TenantRouting, SecondaryTierManager):  # type: ignore[misc]
    """KV chunks in S3 (or MinIO, Ceph, any S3-compatible store), from pure Python.

    ``url`` is ``s3://bucket/prefix``. Connection options are :class:`s3kv.S3Settings`
    fields (``endpoint_url``, ``region``, ``concurrency``, ``ca_bundle``, ``profile``,
    ``max_attempts``, ``checksum``, ...); unset ones come from ``S3KV_*``/``AWS_*``
    variables; credentials from boto3's usual chain. The manifest (``config.json``) is
    written at start, create-only: a store that cannot be reached fails engine start.
    ``read_only=True`` (a consumer holding reader rights) sends no write at all: the
    manifest must exist and match, and stores are skipped (see ``_readonly``).

    ``renew_after`` (seconds, or a duration such as ``"1d"``; ``"off"`` to turn it off):
    a block this tier uses (a load, a lookup HIT, ``touch``) whose ``Last-Modified`` is
    older is renewed, so the bucket's lifecycle rule and ``s3kv gc`` count from its last
    use (see :mod:`s3kv.ops.gc.renewal`). A read-only tier never renews.

    On a bad day (docs/vllm-tier.md): ``wait_budget_seconds`` bounds what a request's
    lookups and load wait together (:mod:`s3kv.vllm._budget`); ``breaker_failures``
    failures in a row stop the tier asking the store until a probe finds it answering
    (:mod:`s3kv.vllm._health`); ``require_checksum=True`` refuses blocks stored without
    a checksum (:mod:`s3kv.vllm._loads`).

    Tenants (:mod:`s3kv.vllm._tenants`): ``default_tenant`` is the tenant of requests
    naming none; ``require_tenant=True`` (implied by ``sse_c_secret_file``) offloads none
    of them instead.

    ``io_process`` (``"auto"``, ``"on"``, ``"off"``): where loads and stores run
    (:mod:`s3kv.vllm._io_process`): ``auto`` starts an I/O process beside EngineCore
    that maps vLLM's shared CPU region, where the region can be shared, and runs them in
    EngineCore's process otherwise; ``on`` fails engine start without the process;
    ``off`` never starts one.
    """

    medium: ClassVar[Medium] = Medium.STORAGE

    def __init__(
        self,
        offloading_spec: OffloadingSpec,
        primary_kv_view: memoryview,
        tier_type: str,
        url: str,
        *,
        style: KeyStyle = "s3kv",
        read_only: bool = False,
        require_checksum: bool = False,
        wait_budget_seconds: float = DEFAULT_WAIT_BUDGET_SECONDS,
        breaker_failures: int = BREAKER_FAILURES,
        enable_kv_events: bool = False,
        locality: str | None = None,
        backpressure_detector: BackpressureDetector | None = None,
        renew_after: float | str | None = DEFAULT_RENEW_AFTER_SECONDS,
        default_tenant: str | None = None,
        require_tenant: bool = False,
        io_process: str = "auto",
        **settings: Any,
    ) -> None:
        self.metrics = TierMeter(tier_label(offloading_spec, tier_type, url))
        self.read_only = read_only
        self._budget = WaitBudget(parse_budget(wait_budget_seconds))
        self._quiet = QuietLog(logger)
        self.health = StoreHealth(
            self._probe,
            failures_to_open=parse_failures(breaker_failures),
            fast_enough=self._budget.seconds,
            on_change=self._health_changed,
        )
        self.cost = LoadCost(lambda key, n: self.store.get_range(key, start=0, end=n))
        # vLLM asks it before each store: a declined store pins no row
        gate = StoreGate(self._declines, self._declined, backpressure_detector)
        super().__init__(offloading_spec, primary_kv_view, tier_type, gate)
        self.locality = Locality(locality) if locality is not None else None
        self.events: list[OffloadingEvent] | None = None
        if enable_kv_events and offloading_spec.kv_events_config.enable_kv_cache_events:
            self.events = []
        elif enable_kv_events:
            logger.warning("enable_kv_events is set on tier %r but KV events are off", tier_type)

        self.namespace = tier_namespace(offloading_spec, tier_type=tier_type)
        warn_if_untested(tier_type)
        self.settings = tier_settings(S3Settings.resolve(**settings))
        location = parse_location(url)
        require_checksum = _flag("require_checksum", require_checksum)
        io = open_tier_io(
            location,
            self.namespace,
            self.settings,
            self.metrics,
            style=style,
            renew_after=None if read_only else parse_renew_after(renew_after),
            announce_removals=self.events is not None,
            wait_seconds=self._budget.seconds,
            require_checksum=require_checksum,
            listeners=(self.health.on_request, self.cost.on_request),
            read_only=read_only,
        )
        self.store, self.uploader, self.prober = io.store, io.uploader, io.prober
        self.usage, self.renewer = io.usage, io.usage.renewer
        self._notes = LoadNotes(self.metrics, url=location.url, require_checksum=require_checksum,
                                writes_refused=self.health.writes_refused)  # fmt: skip
        self.healed = 0
        """Damaged copies replaced by this tier's stores (every tenant's)."""
        self._open_tenants(io.tenants, TenantPolicy(
            default_tenant=default_tenant,
            require_tenant=require_tenant or self.settings.sse_c_secret_file is not None,
        ), read_only=read_only, tier_type=tier_type)  # fmt: skip

        self._tokens = chunk_tokens(offloading_spec)
        self._deadlines = Deadlines(name="s3kv-tier-deadlines")
        path = PathConfig(
            location.url, self.namespace, self.settings, style, self.settings.concurrency,
            self._budget.seconds, self.block_size_bytes, require_checksum, vllm_version(),
            self.uploader.manifest_recheck_seconds,
        )  # fmt: skip
        data_path, why = open_io(path, primary_kv_view, io_process)
        self._runner = JobRunner(data_path, on_finished=self._remember,
                                 replay=io.on_request)  # fmt: skip
        self.io_mode = data_path.mode
        """``io-process`` or ``in-process``: where loads and stores run."""
        windowed = [
            g.group_id
            for g in offloading_spec.config.groups
            # vLLM 0.32.0 offloads no sliding-window groups (it has no such field)
            if getattr(g, "sliding_window_size_in_chunks", None) is not None
        ]
        guards = Guards(
            self._budget, self._deadlines, self.health, self.cost, self.block_size_bytes,
            self._quiet,
        )  # fmt: skip
        self._lookup_manager = S3AsyncLookupManager(
            self.prober, tier_type, windowed_groups=windowed, on_hits=self._used,
            guards=guards, route=self._route,
        )
        logger.info(
            "s3kv tier %r: %s (%s keys, folder %s)%s",
            tier_type,
            location.url,
            style,
            self.namespace.folder,
            self._tenancy_text(location.url),
        )
        if why:
            logger.info("s3kv tier %r: loads and stores run in EngineCore's process (%s)",
                        tier_type, why)  # fmt: skip
        else:
            logger.info("s3kv tier %r: loads and stores run in an I/O process (pid %s)",
                        tier_type, getattr(data_path, "pid", "?"))  # fmt: skip
        if read_only:
            logger.info(
                "s3kv tier %r is read-only: manifest found, loads only, stores skipped "
                "(no write request is sent)",
                tier_type,
            )

    # -- lookups ------------------------------------------------------------------------

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        if self._io(req_context) is None:
            return LookupResult.MISS
        self._budget.start(req_context.req_id)  # the request's wait starts here
        found = self._lookup_manager.lookup(key, req_context)
        if found is None:
            return LookupResult.RETRY
        return LookupResult.HIT if found else LookupResult.MISS

    def on_request_finished(self, req_context: ReqContext) -> None:
        self._lookup_manager.cleanup(req_context.req_id)
        self._budget.forget(req_context.req_id)

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        self._lookup_manager.flush()

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext) -> None:
        """vLLM marks chunks used: renew them (blocks this tier never read are HEADed)."""
        io = self._io(req_context)
        if io is None:
            return
        ordered = list(keys)
        for chain in chains(ordered, req_context).values():
            self._used([ordered[i] for i in chain], io.keys, probe_unknown=True)

    def _used(self, chain: Sequence[OffloadKey], mapper: KeyMapper, *,
              probe_unknown: bool = False) -> None:  # fmt: skip
        """Blocks of one chain (in chain order) were used: queue their renewal."""
        if self.renewer is not None:
            self.usage.used([mapper.key_for(k) for k in chain], probe_unknown=probe_unknown)

    # -- transfers ----------------------------------------------------------------------

    def submit_store(self, job_metadata: TransferJob) -> None:
        keys = list(job_metadata.keys)
        verdict = "read_only" if self.read_only else self.health.may_store()
        if verdict not in ("go", "trial"):
            self._declined(len(keys), verdict)
            self._runner.refuse(job_metadata, f"store declined ({verdict})")
            return
        io = self._io(job_metadata.req_context)
        if io is None:  # its tenant field: nothing stored (counted when it came)
            self._runner.refuse(job_metadata, "not offloaded (its tenant)")
            return
        mapper, damaged = io.keys, io.uploader.damaged
        replace = {k: etag for k in keys if (etag := damaged.get(mapper.key_for(k)))}
        self._runner.submit(
            job_metadata,
            parents(keys, job_metadata.req_context, self._tokens),
            tenant=io.tenant,
            limit=1 if verdict == "trial" else None,  # after refused writes: one block
            present=io.known_present(keys),
            replace=replace,
            manifest=io.uploader.manifest_data,
        )

    def submit_load(self, job_metadata: TransferJob) -> None:
        io = self._io(job_metadata.req_context)  # None: never looked up as a HIT
        if io is None or self.health.is_open:
            why = "not offloaded (its tenant)" if io is None else "the store's breaker is open"
            self._runner.refuse(job_metadata, why)
            return
        deadline = self._budget.deadline(job_metadata.req_context.req_id)
        self._runner.submit(job_metadata, tenant=io.tenant, deadline=deadline)

    def get_finished_jobs(self) -> Iterable[JobResult]:
        return [self._result(f) for f in self._runner.finished()]

    def _declines(self) -> str | None:
        """Why a store would be declined now (the gate's question), or None."""
        if self.read_only:
            return "read_only"
        if self.health.declines_stores():
            return "breaker" if self.health.is_open else "refused"
        return None

    def _declined(self, blocks: int, why: str) -> None:
        if why == "read_only":
            self.metrics.count(SKIPPED_STORE_BLOCKS, by=blocks)
        else:
            self.metrics.count(DROPPED_STORE_BLOCKS, why, by=blocks)

    def _result(self, finished: Finished) -> JobResult:
        job, report = finished.job, finished.report
        keys = list(job.keys)
        if report is None:
            ok: tuple[OffloadKey, ...] = ()
            seconds, nbytes = 0.0, 0
        else:
            ok = report.done if job.is_promotion else report.done + report.already_present
            seconds, nbytes = report.seconds, report.bytes
        success = len(ok) == len(keys)
        if not job.is_promotion:
            if self.events is not None and ok:
                self.events.append(
                    OffloadingEvent(
                        keys=list(ok), medium=self.medium, removed=False, locality=self.locality
                    )
                )
            return JobResult(job.job_id, success, None, seconds, nbytes)
        if success:
            return JobResult(job.job_id, True, None, seconds, nbytes)
        # Only the failed keys are recomputed; the lookup cache stops offering them, and
        # the presence cache forgets what was missing or damaged (not what a failing
        # store could not bring: it is still there).
        good = set(ok)
        failed = [k for k in keys if k not in good]
        gone = set(report.missing) if report is not None else set()
        io = self._route(job.req_context)
        mapper, damaged = io.keys, io.uploader.damaged
        self._lookup_manager.mark_miss(
            failed, absent=[k for k in failed if k in gone or mapper.key_for(k) in damaged],
            req_context=job.req_context,
        )
        return JobResult(job.job_id, False, ok or None, seconds, nbytes)

    def _remember(self, finished: Finished) -> None:
        """On the I/O thread: log failures (rate-limited), feed the store's health and
        the load model; stored blocks are known present from now on."""
        report, job = finished.report, finished.job
        if finished.refused:
            return  # declined without a request: counted when declined
        io = self._route(job.req_context)
        self._notes.on_notes(finished.notes, io.uploader.damaged)
        if finished.replaced and report is not None:
            self._healed_by(report, finished.replaced, io.uploader)
        self.metrics.on_job(is_load=job.is_promotion, report=report)
        self._count_tenant(job, report)
        kind = "load" if job.is_promotion else "store"
        if finished.expired:
            self.metrics.count(BUDGET_EXPIRED, "load")
            self.health.failure("a load ran out of its wait budget", started=job.submit_time)
        if report is None:
            self._quiet.warning(kind, "s3kv tier: %s job %s failed: %s", kind, job.job_id,
                                finished.error)  # fmt: skip
            return
        if job.is_promotion:
            self._budget.forget(job.req_context.req_id)
            if finished.expired:
                self.cost.on_load(len(job.keys) * self.block_size_bytes, report.seconds,
                                  finished=False)  # fmt: skip
            elif report.ok and report.bytes:
                self.cost.on_load(report.bytes, report.seconds, finished=True)
        elif report.done:
            self.health.writes_work()
        if report.failed or report.missing:
            why = "; ".join(f"{k.hex()}: {r}" for k, r in list(report.failed.items())[:3])
            self._quiet.warning(
                kind,
                "s3kv tier: %s job %s: %d of %d blocks failed, %d missing%s",
                kind,
                job.job_id,
                len(report.failed),
                report.count,
                len(report.missing),
                f" ({why})" if why else "",
            )
        mapper = io.keys
        if job.is_promotion:
            done = set(report.done)
            presence = io.prober.presence
            for key in report.done:  # loaded and verified: present, for the next lookups
                presence.put(mapper.key_for(key), True)
            self._used([k for k in job.keys if k in done], mapper)  # in vLLM's chain order
        else:
            stored = [mapper.key_for(key) for key in report.done + report.already_present]
            for object_key in stored:
                io.prober.presence.put(object_key, True)
            self.usage.present(stored)

    def _healed_by(self, report: TransferReport, replaced: frozenset[bytes],
                   uploader: Uploader) -> None:  # fmt: skip
        """A store sent to replace damaged copies: those it wrote are healed, those it
        found replaced already (by another writer) are no longer damaged either."""
        done = set(report.done)
        for key in replaced & (done | set(report.already_present)):
            if uploader.damaged.pop(uploader.keys.key_for(key), None) is not None and key in done:
                uploader.healed += 1
                self.healed += 1

    def take_events(self) -> Iterable[OffloadingEvent]:
        if self.events:
            events, self.events = self.events, []
            yield from events
        removed = self.usage.take_removed()  # blocks seen present, since found gone
        if removed:
            yield OffloadingEvent(
                keys=removed, medium=self.medium, removed=True, locality=self.locality
            )

    # -- metrics ------------------------------------------------------------------------

    @classmethod
    def build_metric_definitions(
        cls, extra_config: dict[str, Any]
    ) -> dict[str, OffloadingMetricMetadata]:
        return {**metric_definitions(), **tenant_metric_definitions()}

    def get_stats(self) -> OffloadingConnectorStats | None:
        lookups = self._lookup_manager
        self.metrics.on_lookups(lookups.heads_sent, lookups.cache_answers)
        skipped: dict[tuple[str, ...], float] = {
            (reason,): float(n) for reason, n in lookups.skipped.items()
        }
        self.metrics.on_totals(SKIPPED_LOOKUPS, skipped)
        self.metrics.on_totals(BUDGET_EXPIRED, {("lookup",): float(lookups.expired)})
        self.metrics.on_totals(HEALED_BLOCKS, {(): float(self.healed)})
        self.metrics.on_totals(BREAKER_OPENINGS, {(): float(self.health.opened)})
        self.metrics.on_totals(RENEWALS, self.usage.renewal_totals())
        self.metrics.on_totals(RETAGS, self.usage.retag_totals())
        self.metrics.on_totals(REMOVED_BLOCKS, {(): float(self.usage.removed)})
        return self.metrics.take_stats()

    # -- lifecycle ----------------------------------------------------------------------

    def drain_jobs(self) -> None:
        """Block until no job reads or writes the primary rows (results: next poll)."""
        self._runner.wait_idle()

    def shutdown(self) -> None:
        """Stop lookups, drop jobs not started, cancel running ones, close connections."""
        self._lookup_manager.shutdown()
        self.health.close()
        if self.renewer is not None:
            self.renewer.close()  # what it had queued is dropped: renewal is best effort
        self._runner.shutdown(timeout=SHUTDOWN_TIMEOUT_SECONDS)
        self._deadlines.close()
        self.tenants.close()  # every tenant's transfers, then the base location's
        self.store.close()

    # -- the store's health -------------------------------------------------------------

    def _probe(self) -> object:
        """An open breaker's look (one request, no retry: see :mod:`s3kv.vllm._health`)."""
        return self.store.head(self.uploader.keys.namespace_prefix() + PROBE_NAME)

    def _health_changed(self, change: Change, why: str) -> None:
        """One log line and a gauge per change; an opening also ends what waits."""
        announce(change, why, tier_type=self.tier_type, meter=self.metrics, quiet=self._quiet)
        if change == "opened" and hasattr(self, "_lookup_manager"):  # not while starting
            # off the reporting thread: a cancel completes jobs, which report here
            threading.Thread(target=self._runner.cancel_running, daemon=True).start()
            self._lookup_manager.answer_pending("breaker")


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} {value!r} is not true or false")
    return value
