"""The tier on a faulty wire (issue 19): a stalled load job ends in bounded time and
shutdown cancels it at once; the tier goes where the profile says, and refuses a store
that ignores If-None-Match. Both data paths, through tests/faults/proxy.py."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult

from s3kv import UnsupportedByStoreError
from tests.faults.proxy import FaultProxy, Request
from tests.vllm import harness as h

pytestmark = pytest.mark.vllm
SENTINEL = 0x5A
CONNECT = READ = 0.5
FAST = {"connect_timeout_seconds": CONNECT, "read_timeout_seconds": READ, "max_attempts": 3,
        "backoff_base_seconds": 0.01, "backoff_max_seconds": 0.05, "deadline_seconds": 20}


@pytest.fixture(params=["crt", "botocore"])
def data_path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def proxies(moto_server: str) -> Iterator[Any]:
    made: list[FaultProxy] = []

    def make(rule: Any = None, **options: Any) -> FaultProxy:
        made.append(FaultProxy(moto_server, rule, **options))
        return made[-1]

    yield make
    for p in made:
        p.close()


def stored(bucket: str, moto_server: str, n: int, start: int) -> tuple[np.ndarray, list[Any]]:
    """``n`` blocks stored by a tier straight at moto; rows 0..n-1 hold them."""
    view, array = h.primary_view()
    tier = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/team/kv", endpoint_url=moto_server)
    try:
        ks = h.keys(n, start=start)
        h.fill(array, range(n), seed=start)
        assert h.run(tier, h.job(ks, range(n), load=False)).success
    finally:
        tier.shutdown()
    return array.copy(), ks


def stall_gets(request: Request) -> str | None:
    return "stall" if h.is_load(request) else None


def test_a_stalled_load_job_ends_within_attempts_and_timeouts(
    proxies: Any, bucket: str, moto_server: str, data_path: str
) -> None:
    _, ks = stored(bucket, moto_server, 4, start=300)
    p = proxies(stall_gets)
    view, rows = h.primary_view()
    rows[:] = SENTINEL
    tier = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/team/kv", endpoint_url=p.url,
                     data_path=data_path, **FAST)
    try:
        assert h.lookup(tier, ks) == [LookupResult.HIT] * 4
        per_attempt = CONNECT + READ if data_path == "crt" else READ
        # three attempts' timeouts and backoff, and thread hand-offs and a proxy on a box
        # at load 3-5 (CI's); far short of the 30 s+ a load took on awscrt before
        limit = 1.1 * (per_attempt * 3 + 0.1) + 1.5
        started = time.monotonic()
        tier.submit_load(h.job(ks, range(4), load=True))
        (result,) = h.wait_finished(tier, timeout=limit + 5)
        took = time.monotonic() - started
    finally:
        tier.shutdown()
    assert not result.success and took <= limit, took
    # each block was tried at most max_attempts times: the job gave up, it did not go on
    per_block = Counter(r.path for r in p.seen("GET", blocks=True) if h.is_load(r))
    assert per_block and max(per_block.values()) <= FAST["max_attempts"], per_block
    assert set(np.unique(rows[:4]).tolist()) <= {0, SENTINEL}  # no partial block


def test_shutdown_cancels_a_stalled_load_at_once(
    proxies: Any, bucket: str, moto_server: str, data_path: str
) -> None:
    _, ks = stored(bucket, moto_server, 4, start=310)
    p = proxies(stall_gets)
    view, rows = h.primary_view()
    tier = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/team/kv", endpoint_url=p.url,
                     data_path=data_path, **{**FAST, "read_timeout_seconds": 1.5,
                                             "max_attempts": 20})
    assert h.lookup(tier, ks) == [LookupResult.HIT] * 4
    tier.submit_load(h.job(ks, range(4), load=True))
    time.sleep(0.3)  # the GETs are on the wire, stalled
    started = time.monotonic()
    tier.shutdown()  # today on awscrt: waits its 30 s and leaves the job running
    took = time.monotonic() - started
    assert took <= 1.5 + 3.0  # within the read timeout (awscrt: at once), not 30 s
    assert tier._runner.wait_idle(0)
    assert not rows.any()  # nothing written after the cancel


def test_the_tier_goes_where_the_profile_says(
    proxies: Any,
    bucket: str,
    moto_server: str,
    data_path: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    array, ks = stored(bucket, moto_server, 3, start=320)
    p = proxies()
    config = tmp_path / "aws-config"
    # the profile's endpoint_url is a dead port: the services section wins for S3
    config.write_text(
        "[profile fromfile]\nregion = us-east-1\naws_access_key_id = testing\n"
        "aws_secret_access_key = testing\nendpoint_url = http://127.0.0.1:9\n"
        f"services = local\n\n[services local]\ns3 =\n  endpoint_url = {p.url}\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("S3KV_TRACE_FILE", str(trace))
    view, rows = h.primary_view()
    tier = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/team/kv", profile="fromfile",
                     data_path=data_path, **FAST)
    try:
        assert h.lookup(tier, ks) == [LookupResult.HIT] * 3
        assert h.run(tier, h.job(ks, range(3), load=True)).success
        fresh = h.keys(2, start=330)
        h.fill(rows, range(3, 5), seed=330)
        assert h.run(tier, h.job(fresh, range(3, 5), load=False)).success  # today: AWS
    finally:
        tier.shutdown()
    assert np.array_equal(rows[:3], array[:3])
    sent = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {r.host for r in p.requests} == {f"127.0.0.1:{p.port}"}
    # looks are GETs of one byte (or HEADs): every request of the three kinds went there
    assert len(p.requests) == len(sent) and {"PutObject", "GetObject"} <= {r["op"] for r in sent}


def test_the_tier_refuses_a_store_that_ignores_if_none_match(
    proxies: Any, bucket: str, data_path: str
) -> None:
    p = proxies(lambda r: "drop-inm" if r.method == "PUT" else None)
    view, _ = h.primary_view()
    with pytest.raises(UnsupportedByStoreError, match="ignores If-None-Match"):
        h.s3_tier(view, h.spec(), url=f"s3://{bucket}/team/kv", endpoint_url=p.url,
                  data_path=data_path, **FAST)
    assert not p.seen("PUT", blocks=True)  # engine start fails before any block


def test_a_tier_store_on_a_store_without_tags_fails_fast(
    proxies: Any, bucket: str, data_path: str
) -> None:
    p = proxies(lambda r: "501" if r.method == "PUT" and r.header("x-amz-tagging") else None)
    view, rows = h.primary_view()
    tier = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/team/kv", endpoint_url=p.url,
                     data_path=data_path, **{**FAST, "max_attempts": 8})
    try:
        ks = h.keys(3, start=340)
        h.fill(rows, range(3), seed=340)
        started = time.monotonic()
        result = h.run(tier, h.job(ks, range(3), load=False))
        took = time.monotonic() - started
    finally:
        tier.shutdown()
    assert not result.success and took < 5.0  # not 8 attempts at awscrt's pace
    assert len(p.seen("PUT", blocks=True)) == 3  # today: 8 attempts each, and awscrt's
