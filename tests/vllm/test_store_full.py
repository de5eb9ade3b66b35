"""A store that is full (507 Insufficient Storage, as Ceph RGW answers over its quota):
a write it refused is not retried, and stores pause (issue 40). Through the fault proxy
in front of moto's server, both data paths."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import s3kv.errors
from tests.faults import proxy as fault_proxy
from tests.faults.proxy import FaultProxy
from tests.vllm import harness as h

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.xfail(
        not hasattr(s3kv.errors, "StoreFullError"), strict=True,
        reason="507 is retried as transient until s3kv/stores/rules.py maps it to "
        "StoreFullError (the owner's part of issue 40)"),
]


@pytest.mark.parametrize("data_path", ["crt", "botocore"])
def test_a_full_store_gets_each_write_once_and_stores_pause(
    moto_server: str, bucket: str, data_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(fault_proxy.ERRORS, "507", (507, "InsufficientStorage"))
    with FaultProxy(moto_server, lambda r: "507" if r.is_block and r.method == "PUT"
                    else None) as proxy:  # fmt: skip
        view, rows = h.primary_view()
        tier = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/team/kv", endpoint_url=proxy.url,
                         data_path=data_path, max_attempts=8)
        try:
            h.fill(rows, range(4), seed=1)
            assert not h.run(tier, h.job(h.keys(4, start=50), range(4), load=False)).success
            assert tier.health.declines_stores()
            assert not tier.bp_detector.should_store(4)
        finally:
            tier.shutdown()
    per_block: Any = Counter(r.path for r in proxy.seen("PUT", blocks=True))
    assert len(per_block) == 4 and set(per_block.values()) == {1}, per_block
