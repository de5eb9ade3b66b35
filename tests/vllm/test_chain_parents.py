"""Each block the tier stores carries its parent (issue 28, point 4): from the positions
vLLM's scheduler records for a request's keys, across store jobs; without positions,
from the job's own order. Written as ``x-amz-meta-s3kv-parent`` (moto's server)."""

from __future__ import annotations

from typing import Any

import pytest
from vllm.v1.kv_offload.base import ReqContext

from s3kv.naming.chains import PARENT_METADATA_KEY
from s3kv.vllm._chain import chunk_tokens, parents
from tests.vllm import harness as h
from tests.vllm import managed

pytestmark = pytest.mark.vllm


def test_a_store_jobs_first_block_finds_its_parent_among_the_requests_keys() -> None:
    ks = h.keys(10, start=8000) + h.keys(3, start=8100, group=1)
    ctx = managed.positioned(ReqContext(req_id="r"), ks[:10])
    managed.positioned(ctx, ks[10:])  # a second group: its own chain
    tokens = {0: 16, 1: 16}
    assert parents(ks[4:8], ctx, tokens) == dict(zip(ks[4:8], ks[3:7]))
    assert parents(ks[:1], ctx, tokens) == {}  # a chain's head has none
    assert parents(ks[11:13], ctx, tokens) == {ks[11]: ks[10], ks[12]: ks[11]}
    # a key the scheduler added later is found too (the index grows with the request)
    more = h.keys(2, start=8200)
    ctx.set_offload_key_position(more[0], 16 * 11)
    ctx.set_offload_key_position(more[1], 16 * 12)
    assert parents(more[1:], ctx, tokens) == {more[1]: more[0]}
    assert parents(more[:1], ctx, tokens) == {more[0]: ks[9]}


def test_without_positions_the_jobs_order_is_the_chains() -> None:
    ks = h.keys(4, start=8300)
    assert parents(ks, ReqContext(req_id="bare"), {0: 16}) == dict(zip(ks[1:], ks))


def test_the_tier_writes_each_blocks_parent(make_tier: Any, s3_client: Any,
                                            bucket: str) -> None:
    view, array = h.primary_view()
    spec = h.spec()
    assert chunk_tokens(spec) == {0: 16}
    tier = make_tier(view, spec)
    ks = h.keys(6, start=8400)
    h.fill(array, range(6), seed=84)
    ctx = managed.positioned(ReqContext(req_id="w"), ks)
    for part in (ks[:3], ks[3:]):  # two store jobs of one request
        job = h.job(part, [ks.index(k) for k in part], load=False)
        job = type(job)(job_id=job.job_id, keys=job.keys, chunk_ids=job.chunk_ids,
                        is_promotion=False, req_context=ctx)
        assert h.run(tier, job).success
    for i, k in enumerate(ks):
        meta = s3_client.head_object(Bucket=bucket, Key=tier.uploader.keys.key_for(k))
        written = meta["Metadata"].get(PARENT_METADATA_KEY)
        assert written == (ks[i - 1][:-4].hex() if i else None), i
