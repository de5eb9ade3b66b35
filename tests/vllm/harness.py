"""Building vLLM's real offloading objects without a GPU, and driving a tier like vLLM."""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext, make_offload_key
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.tiering.base import JobResult, ScheduleEndContext, TransferJob
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

ROW_BYTES = 64 * 1024
MODEL = "Qwen/Qwen3-0.6B"
END = ScheduleEndContext(new_req_ids=[], preempted_req_ids=())


def offloading_config(
    *, row_bytes: int = ROW_BYTES, chunks: int = 8, engine_id: str = "s3kv-test",
    secondary_tiers: Sequence[dict[str, Any]] = (), blocks_per_chunk: int = 1,
) -> OffloadingConfig:
    extra: dict[str, Any] = {"spec_name": "TieringOffloadingSpec",
                             "cpu_bytes_to_use": chunks * row_bytes}
    if secondary_tiers:
        extra["secondary_tiers"] = list(secondary_tiers)
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=16, group_id=0, layer_names=(
            "model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn")),),
        worker_kv_bytes_per_block=row_bytes,
        enable_kv_cache_events=False,
        extra_config=extra,
        engine_id=engine_id,
        model=OffloadingModelConfig(name=MODEL, dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=blocks_per_chunk),
        parallel=OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=True),
    )


def spec(**kwargs: Any) -> TieringOffloadingSpec:
    return TieringOffloadingSpec(offloading_config(**kwargs))


def primary_view(chunks: int = 8, row_bytes: int = ROW_BYTES, *,
                 shared: bool = True) -> tuple[memoryview, np.ndarray]:  # fmt: skip
    """A page-aligned int8 region shaped like vLLM's CPU primary tier.

    ``shared`` (the default): as vLLM's ``SharedOffloadRegion``, a ``MAP_SHARED`` file in
    /dev/shm (unlinked at once: the mapping keeps it), so the tier runs its data path in
    an I/O process that maps it too; else an anonymous mapping, which only this process
    can reach (the tier runs it in-process)."""
    nbytes = chunks * row_bytes
    if shared:
        fd, path = tempfile.mkstemp(prefix="s3kv-test-region-", dir="/dev/shm")
        try:
            os.unlink(path)
            os.ftruncate(fd, nbytes)
            region = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED)  # holds a descriptor
        finally:
            os.close(fd)
    else:
        region = mmap.mmap(-1, nbytes)
    array = np.frombuffer(region, dtype=np.int8).reshape(chunks, row_bytes)
    return memoryview(array), array


def fill(array: np.ndarray, rows: Iterable[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    for r in rows:
        array[r] = rng.integers(-128, 128, array.shape[1], dtype=np.int8)


def keys(n: int, start: int = 0, group: int = 0) -> list[OffloadKey]:
    """vLLM's OffloadKeys for 32-byte block hashes (what sha256 prefix caching yields)."""
    return [make_offload_key(np.random.default_rng(start + i).bytes(32), group) for i in range(n)]


def s3_tier(view: memoryview, spec: TieringOffloadingSpec, **options: Any) -> Any:
    config = {"type": "S3TierManager", "module_path": "s3kv.vllm", "max_attempts": 2,
              "backoff_base_seconds": 0.01, **options}
    return SecondaryTierFactory.create_secondary_tier(config, view, spec)


def data_path(tier: Any) -> Any:
    """The tier's data path, where it runs in this process (``io_process="off"``)."""
    return tier._runner.io.path


def data_uploader(tier: Any, tenant: str | None = None) -> Any:
    """The uploader that stores a tier's blocks (see :func:`data_path`)."""
    return data_path(tier)._for(tenant)[0]


def fs_tier(view: memoryview, spec: TieringOffloadingSpec, root: str) -> Any:
    config = {"type": "fs", "root_dir": root, "n_read_threads": 1, "n_write_threads": 1}
    return SecondaryTierFactory.create_secondary_tier(config, view, spec)


_job_ids = iter(range(1, 1 << 30))


def job(ks: Sequence[OffloadKey], rows: Sequence[int], *, load: bool,
        req: str = "req-0") -> TransferJob:
    return TransferJob(job_id=next(_job_ids), keys=list(ks),
                       chunk_ids=np.asarray(rows, dtype=np.int32), is_promotion=load,
                       req_context=ReqContext(req_id=req))


def wait_finished(tier: Any, n: int = 1, timeout: float = 30.0) -> list[JobResult]:
    """Poll ``get_finished_jobs`` (as vLLM does, once a step) until ``n`` jobs are back."""
    results: list[JobResult] = []
    deadline = time.monotonic() + timeout
    while len(results) < n:
        results.extend(tier.get_finished_jobs())
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(results)} of {n} jobs finished in {timeout}s")
        time.sleep(0.002)
    return results


def run(tier: Any, transfer: TransferJob) -> JobResult:
    (tier.submit_load if transfer.is_promotion else tier.submit_store)(transfer)
    (result,) = wait_finished(tier)
    assert result.job_id == transfer.job_id
    return result


def lookup(tier: Any, ks: Sequence[OffloadKey], req: str = "req-0",
           timeout: float = 30.0) -> list[LookupResult]:
    """Look up until no key answers RETRY, stepping like the scheduler does."""
    ctx = ReqContext(req_id=req)
    deadline = time.monotonic() + timeout
    while True:
        answers = [tier.lookup(k, ctx) for k in ks]
        if LookupResult.RETRY not in answers:
            return answers
        tier.on_schedule_end(END)
        if time.monotonic() > deadline:
            raise TimeoutError("lookups still RETRY")
        time.sleep(0.005)


def finish(tier: Any, req: str = "req-0") -> None:
    tier.on_request_finished(ReqContext(req_id=req))


def obj_tier(view: memoryview, spec: TieringOffloadingSpec, *, endpoint: str, bucket: str,
             prefix: str, access_key: str = "testing", secret_key: str = "testing",
             ca_bundle: str = "", io_threads: int = 4, rgw: bool = False) -> Any:
    """vLLM's own object-store tier (``ObjectStoreSecondaryTierManager``, via NIXL).

    ``rgw``: Ceph RGW 16 answers the obj tier's default aws-chunked uploads with 411
    Length Required, so the AWS SDK is told to checksum only when required (s3kv needs
    nothing: tests/data/vllm_obj_tier_wire_keys.json). The SDK reads it at construction.
    """
    scheme, _, host = endpoint.partition("://")
    store = {"bucket": bucket, "endpoint_override": host, "scheme": scheme,
             "access_key": access_key, "secret_key": secret_key, "region": "us-east-1",
             "ca_bundle": ca_bundle}
    config = {"type": "obj", "store_config": store, "prefix": prefix, "io_threads": io_threads}
    with environ({"AWS_REQUEST_CHECKSUM_CALCULATION": "when_required"} if rgw else {}):
        return SecondaryTierFactory.create_secondary_tier(config, view, spec)


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` for the block; what was there before, afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def locked(manager: Any) -> AbstractContextManager[Any]:
    """The tiering manager's lock, held as vLLM 0.33's scheduler does (0.32 has none)."""
    lock = getattr(manager, "lock", None)
    return lock if lock is not None else contextlib.nullcontext()


LOOK_RANGE = "bytes=0-0"
"""A presence look is a GET of a block's first byte (s3kv's bound look), or a HEAD."""


def is_look(request: Any) -> bool:
    """A proxied request (tests/faults/proxy.py) that asks whether a block exists."""
    return request.is_block and (
        request.method == "HEAD"
        or (request.method == "GET" and request.header("range") == LOOK_RANGE)
    )


def is_load(request: Any) -> bool:
    """A proxied request that reads a block's bytes (a whole block, or one of its parts)."""
    return request.is_block and request.method == "GET" and not is_look(request)
