"""Issue 29, point 1: ``s3kv rm`` of an old namespace while vLLM's tier fills the new one.

Two tiers of s3kv built by vLLM's own factory on moto's S3 server, under one prefix: the
old deployment's namespace and the new one's (another chunk size, so another digest, as
after an upgrade). While the new tier stores job after job, ``rm`` removes the old
namespace; it starts deleting only once a store of the new tier has landed meanwhile, so
the two overlap. Afterwards the old namespace is gone, and the new tier finds every block
it stored and loads them byte for byte. (The same with s3kv's Uploader on moto, moto's
server and Ceph RGW over HTTP and TLS: tests/functional/test_remove.py.)
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult

from s3kv import S3Settings
from s3kv.ops.remove import remove
from s3kv.progress import Progress
from tests.vllm import harness as h

pytestmark = pytest.mark.vllm


def test_rm_of_the_old_namespace_leaves_the_tier_filling_the_new_one(
    make_tier: Any, s3_client: Any, bucket: str, moto_server: str
) -> None:
    old_view, old_rows = h.primary_view()
    old = make_tier(old_view, h.spec())
    h.fill(old_rows, range(4), seed=1)
    assert h.run(old, h.job(h.keys(4, start=500), range(4), load=False)).success
    new_view, new_rows = h.primary_view(chunks=8)
    new = make_tier(new_view, h.spec(blocks_per_chunk=2))
    assert new.namespace.folder != old.namespace.folder
    stored: list[tuple[list[bytes], bytes]] = []
    landed, stop = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def vllm_storing() -> None:  # the new deployment, one store job after another
        try:
            n = 0
            while not stop.is_set():
                ks = h.keys(2, start=600 + n)
                h.fill(new_rows, range(2), seed=n)
                result = h.run(new, h.job(ks, range(2), load=False))
                assert result.success
                stored.append((ks, new_rows[0:2].tobytes()))
                n += 2
                landed.set()
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)
            landed.set()

    def overlap(p: Progress) -> None:
        if p.phase == "deleting" and p.blocks_done == 0:
            landed.clear()
            assert landed.wait(60)

    thread = threading.Thread(target=vllm_storing)
    thread.start()
    try:
        assert landed.wait(60)
        report = remove(f"s3://{bucket}/team/kv", namespaces=[old.namespace.digest],
                        settings=S3Settings.resolve(endpoint_url=moto_server),
                        on_progress=overlap)  # fmt: skip
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    assert report.ok and report.blocks_deleted == 4 and report.manifests_deleted == 1
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert not [k for k in keys if old.namespace.folder in k]
    assert len(stored) >= 2
    for ks, payload in stored:
        assert h.lookup(new, ks, req="after") == [LookupResult.HIT] * 2
        assert h.run(new, h.job(ks, range(2, 4), load=True)).success
        assert new_rows[2:4].tobytes() == payload
    assert np.any(new_rows[2:4])
