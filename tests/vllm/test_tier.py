"""The S3 tier through vLLM's own interface, factory and tiering manager."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult, ReqContext
from vllm.v1.kv_offload.file_mapper import FileMapper

from s3kv.vllm import S3TierManager
from tests.vllm import harness as h

pytestmark = pytest.mark.vllm
HIT, MISS = LookupResult.HIT, LookupResult.MISS


def test_round_trip_store_lookup_load(make_tier: Any, s3_client: Any, bucket: str) -> None:
    spec = h.spec()
    view, array = h.primary_view()
    tier = make_tier(view, spec)
    assert isinstance(tier, S3TierManager)
    assert tier.block_size_bytes == h.ROW_BYTES
    ks = h.keys(4)
    h.fill(array, range(4), seed=1)

    assert h.lookup(tier, ks) == [MISS] * 4
    h.finish(tier)  # a MISS is cached while a request that saw it runs
    result = h.run(tier, h.job(ks, [0, 1, 2, 3], load=False))
    assert result.success and result.transfer_bytes == 4 * h.ROW_BYTES

    assert h.lookup(tier, ks, req="req-1") == [HIT] * 4
    result = h.run(tier, h.job(ks, [7, 6, 5, 4], load=True, req="req-1"))
    assert result.success and result.successful_keys is None
    assert np.array_equal(array[[7, 6, 5, 4]], array[[0, 1, 2, 3]])

    # Keys are vLLM's filesystem-tier paths under the prefix; the manifest is its config.json.
    mapper = FileMapper.from_offloading_spec("team/kv", spec, blocks_per_file=1,
                                             parallel_agnostic=True)
    stored = {o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert stored == {mapper.get_file_name(k) for k in ks} | {mapper.get_config_file_path()}
    manifest = s3_client.get_object(Bucket=bucket, Key=mapper.get_config_file_path())
    written = json.loads(manifest["Body"].read())
    assert written.pop("s3kv")["vllm_version"]  # s3kv's record, which vLLM never reads
    assert written == mapper.get_run_config()


def test_storing_again_is_create_only(make_tier: Any, s3_client: Any, bucket: str) -> None:
    view, array = h.primary_view()
    tier = make_tier(view, h.spec())
    ks = h.keys(2, start=10)
    h.fill(array, range(4), seed=2)
    assert h.run(tier, h.job(ks, [0, 1], load=False)).success
    # Same keys, other bytes: the objects already there are kept, and that is success.
    result = h.run(tier, h.job(ks, [2, 3], load=False))
    assert result.success and result.transfer_bytes == 0
    assert h.run(tier, h.job(ks, [4, 5], load=True)).success
    assert np.array_equal(array[[4, 5]], array[[0, 1]])


def test_load_of_absent_keys_reports_only_those(make_tier: Any) -> None:
    view, array = h.primary_view()
    tier = make_tier(view, h.spec())
    ks = h.keys(3, start=20)
    h.fill(array, range(3), seed=3)
    assert h.run(tier, h.job([ks[0], ks[2]], [0, 2], load=False)).success
    # A hole before a block this tier stored is claimed present (prefix search) ...
    assert h.lookup(tier, ks) == [HIT, HIT, HIT]
    result = h.run(tier, h.job(ks, [5, 6, 7], load=True))
    assert not result.success
    assert set(result.successful_keys) == {ks[0], ks[2]}  # ... and fails only its load
    assert np.array_equal(array[[5, 7]], array[[0, 2]])
    assert h.lookup(tier, ks) == [HIT, MISS, HIT]


def test_drain_jobs_waits_and_results_come_next_poll(make_tier: Any) -> None:
    view, array = h.primary_view()
    tier = make_tier(view, h.spec())
    h.fill(array, range(8), seed=4)
    jobs = [h.job(h.keys(2, start=30 + 2 * i), [2 * i, 2 * i + 1], load=False) for i in range(4)]
    for j in jobs:
        tier.submit_store(j)
    tier.drain_jobs()
    results = list(tier.get_finished_jobs())
    assert sorted(r.job_id for r in results) == sorted(j.job_id for j in jobs)
    assert all(r.success for r in results)
    assert list(tier.get_finished_jobs()) == []


def test_shutdown_with_jobs_in_flight_returns(make_tier: Any) -> None:
    view, array = h.primary_view()
    tier = make_tier(view, h.spec())
    h.fill(array, range(8), seed=5)
    for i in range(4):
        tier.submit_store(h.job(h.keys(2, start=40 + 2 * i), [2 * i, 2 * i + 1], load=False))
    tier.shutdown()  # must neither hang nor raise; make_tier's teardown calls it again


def test_unknown_option_fails_engine_start(moto_server: str, bucket: str) -> None:
    view, _ = h.primary_view()
    with pytest.raises(Exception, match="unknown setting"):
        h.s3_tier(view, h.spec(), url=f"s3://{bucket}/kv", endpoint_url=moto_server,
                  colour="blue")


def test_whole_tiering_manager_cascades_and_promotes(moto_server: str, bucket: str) -> None:
    """vLLM's TieringOffloadingManager with the S3 tier, built from config as vLLM does."""
    tier_config = {"type": "S3TierManager", "module_path": "s3kv.vllm",
                   "url": f"s3://{bucket}/team/kv", "endpoint_url": moto_server}
    spec = h.spec(engine_id=f"s3kv-mgr-{bucket}", secondary_tiers=[tier_config])
    manager = spec.get_manager()
    rows = np.asarray(manager.primary_tier.get_kv_memoryview())
    try:
        (tier,) = manager.secondary_tiers
        assert isinstance(tier, S3TierManager)
        ks = h.keys(4, start=50)
        ctx = ReqContext(req_id="r1")
        with h.locked(manager):
            manager.on_new_request(ctx)
            chunk_ids = list(manager.prepare_store(ks, ctx).store_spec.chunk_ids)
        payload = np.random.default_rng(6).integers(-128, 128, (4, rows.shape[1]), np.int8)
        rows[chunk_ids] = payload  # play the GPU worker
        with h.locked(manager):
            manager.complete_store(ks, ctx)  # cascades: the S3 tier's submit_store
            manager.on_request_finished(ctx)
        _step_until(manager, lambda: not manager.has_pending_work())
        assert h.lookup(tier, ks, req="probe") == [HIT] * 4
        h.finish(tier, "probe")

        with h.locked(manager):
            manager.reset_cache()
            if hasattr(manager, "on_reset_flushed"):  # 0.33's second phase; 0.32 has one
                manager.on_reset_flushed()
        rows[:] = 0
        ctx2 = ReqContext(req_id="r2")
        with h.locked(manager):
            manager.on_new_request(ctx2)
        seen: list[str] = []

        def all_hit() -> bool:
            answers = [manager.lookup(k, ctx2) for k in ks]
            seen.append("/".join(a.name for a in answers))
            return all(a is HIT for a in answers)

        _step_until(manager, all_hit)
        assert "HIT_PENDING" in "".join(seen)  # promoted from S3, not found in the primary
        with h.locked(manager):
            loaded = list(manager.prepare_load(ks, ctx2).chunk_ids)
        assert np.array_equal(rows[loaded], payload)
        with h.locked(manager):
            manager.complete_load(ks, ctx2)
            manager.on_request_finished(ctx2)
    finally:
        del rows  # the region is unmapped at shutdown only if nothing exports it
        manager.shutdown()


def _step_until(manager: Any, done: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with h.locked(manager):
            ok = done()
            manager.on_schedule_end(h.END)
        if ok:
            return
        assert time.monotonic() < deadline, "timed out stepping the manager"
        time.sleep(0.002)


def test_at_concurrency_16_the_tier_keeps_up_to_56_connections(make_tier: Any) -> None:
    # README and docs/benchmarks.md: "s3kv's [tier keeps] up to 56" requests in flight at
    # 16 I/O threads: 2c for stores and loads on the data path's client, 24 lookup threads
    # on EngineCore's (and 4 more connections there for renewals and manifests)
    view, _ = h.primary_view()
    tier = make_tier(view, h.spec(), concurrency=16, io_process="off")
    assert tier._runner.io.path.store.settings.concurrency == 32  # every block size
    assert tier.store.settings.concurrency == 24 + 4
