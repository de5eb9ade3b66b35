"""After ``shutdown()`` the tier holds no view of the primary KV memory.

vLLM unmaps its CPU region (``cpu_bytes_to_use`` bytes) at engine shutdown; a view the
tier still held made ``mmap.close()`` fail with "BufferError: cannot close exported
pointers exist" and kept the whole region mapped.
"""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult, ReqContext

from tests.vllm import harness as h
from tests.vllm.test_tier import _step_until

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("data_path", ["botocore", "crt"])
def test_after_shutdown_the_primary_mmap_closes(
    moto_server: str, bucket: str, data_path: str
) -> None:
    # Built as vLLM builds it: an mmap, an int8 array over it, a memoryview of the array.
    region = mmap.mmap(-1, 8 * h.ROW_BYTES)
    array = np.frombuffer(region, dtype=np.int8).reshape(8, h.ROW_BYTES)
    view = memoryview(array)
    tier = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/kv", endpoint_url=moto_server,
                     data_path=data_path)
    ks = h.keys(3, start=70)
    h.fill(array, range(3), seed=7)
    assert h.run(tier, h.job(ks, [0, 1, 2], load=False)).success
    assert h.lookup(tier, ks, req="r1") == [LookupResult.HIT] * 3
    assert h.run(tier, h.job(ks, [5, 6, 7], load=True, req="r1")).success
    assert np.array_equal(array[[5, 6, 7]], array[[0, 1, 2]])

    tier.shutdown()
    view.release()  # what vLLM's primary tier does at its shutdown
    del array
    region.close()  # BufferError while any view of the tier's is alive


def test_engine_shutdown_unmaps_the_primary_region(moto_server: str, bucket: str) -> None:
    """The whole tiering manager, as the engine shuts it down: vLLM's region is unmapped."""
    tier_config = {"type": "S3TierManager", "module_path": "s3kv.vllm",
                   "url": f"s3://{bucket}/kv", "endpoint_url": moto_server}
    spec = h.spec(engine_id=f"s3kv-shutdown-{bucket}", secondary_tiers=[tier_config])
    manager = spec.get_manager()
    mapped = spec._scheduler_mmap.mmap_obj
    (tier,) = manager.secondary_tiers
    ks = h.keys(2, start=80)
    ctx = ReqContext(req_id="r1")
    with h.locked(manager):
        manager.on_new_request(ctx)
        manager.prepare_store(ks, ctx)
        manager.complete_store(ks, ctx)  # cascades to the S3 tier
        manager.on_request_finished(ctx)
    _step_until(manager, lambda: not manager.has_pending_work())
    assert h.lookup(tier, ks, req="probe") == [LookupResult.HIT] * 2

    manager.shutdown()  # vLLM logs "Failed to close mmap_obj" and carries on if it cannot
    with pytest.raises(ValueError, match="closed"):
        len(mapped)  # an mmap that is still open has a length


def test_shutdown_keeps_the_rows_while_the_transport_still_holds_requests(
    moto_server: str, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """awscrt reports a request finished before it drops the request's callbacks (which
    reach the rows): shutdown waits for the store to let go, and keeps the rows mapped
    (with a warning) rather than hand vLLM a region it cannot unmap."""
    region = mmap.mmap(-1, 8 * h.ROW_BYTES)
    array = np.frombuffer(region, dtype=np.int8).reshape(8, h.ROW_BYTES)
    view = memoryview(array)
    tier = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/kv", endpoint_url=moto_server,
                     data_path="crt", io_process="off")  # the data path in this process
    asked: list[float] = []
    store = h.data_path(tier).store

    def still_held(timeout: float) -> bool:
        asked.append(timeout)
        return False

    real_quiesce, store.quiesce = store.quiesce, still_held
    h.fill(array, range(2), seed=3)
    assert h.run(tier, h.job(h.keys(2, start=90), [0, 1], load=False)).success
    tier.shutdown()
    assert asked and asked[0] > 0
    assert "still holds" in caplog.text
    assert h.data_path(tier)._rows.row(7).nbytes == h.ROW_BYTES  # not released: a live view
    assert real_quiesce(5.0)  # the real transport lets go once its requests shut down
    view.release()
    del array
    with pytest.raises(BufferError):
        region.close()  # the tier's view keeps the region mapped, as the warning says
