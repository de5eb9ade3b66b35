"""A store's bad day costs a request its wait budget at most (issue 40), with vLLM's own
classes and a fault proxy (tests/faults/proxy.py) in front of moto's server.

Each test runs the tier the way vLLM does: lookups step by step (vLLM's own prefix
lookup, tests/vllm/scheduler_loop.py), jobs submitted and polled. The store stalls,
resets connections, stalls only on the manifest, or answers slowly; each test checks what
a request waits, that the tier stops asking a store that fails and asks again once it
answers, and what it logs. tests/e2e/test_bad_day.py does the same with a real engine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult, ReqContext

from tests.faults.proxy import FaultProxy, Request
from tests.vllm import harness as h
from tests.vllm.scheduler_loop import verdicts

pytestmark = pytest.mark.vllm
SENTINEL = 0x5A
BUDGET = 1.0
# Timeouts far below the tier's, and many attempts: without a budget a request would
# wait attempts x timeouts (several seconds); with it, the budget.
FAST = {"connect_timeout_seconds": 0.5, "read_timeout_seconds": 0.5, "max_attempts": 8,
        "backoff_base_seconds": 0.01, "backoff_max_seconds": 0.2, "deadline_seconds": 20,
        "wait_budget_seconds": BUDGET}
SLACK = 0.6  # thread hand-offs and a proxy on a 2-core machine shared with other tests


class Switch:
    """A proxy rule the test changes as it goes: ``fault(request)`` or None."""

    def __init__(self) -> None:
        self.fault: Callable[[Request], str | None] = lambda request: None

    def __call__(self, request: Request) -> str | None:
        return self.fault(request)


@pytest.fixture
def faulty(moto_server: str, bucket: str) -> Iterator[Callable[..., Any]]:
    """``faulty(n, start, **options)``: ``n`` blocks stored straight at moto, then a tier
    through a fault proxy (``tier, proxy, switch, keys, payload``)."""
    made: list[tuple[Any, FaultProxy]] = []

    def make(n: int, start: int, *, delay: float = 0.0, **options: Any) -> Any:
        view, array = h.primary_view()
        writer = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/team/kv", endpoint_url=moto_server)
        ks = h.keys(n, start=start)
        try:
            h.fill(array, range(n), seed=start)
            if n:
                assert h.run(writer, h.job(ks, range(n), load=False)).success
        finally:
            writer.shutdown()
        payload = array[:n].copy()
        switch = Switch()
        proxy = FaultProxy(moto_server, switch, delay=delay)
        view, rows = h.primary_view()
        rows[:] = SENTINEL
        tier = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/team/kv", endpoint_url=proxy.url,
                         **{**FAST, **options})
        made.append((tier, proxy))
        return tier, proxy, switch, ks, payload, rows

    yield make
    for tier, proxy in made:
        tier.shutdown()
        proxy.close()


def _requests(proxy: FaultProxy) -> list[Request]:
    """What reached the proxy, the breaker's probes aside."""
    return [r for r in proxy.seen() if "s3kv-health-probe" not in r.path]


def _s3kv_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("s3kv") and text in r.getMessage()]


def _stat(tier: Any, name: str, *labels: str) -> float:
    stats = tier.get_stats()
    data = stats.data["data"] if stats is not None else {}
    return float(data.get(f"vllm:kv_offload_s3kv_{name}", {}).get((tier.metrics.tier, *labels), 0))


@pytest.mark.parametrize("data_path", ["crt", "botocore"])
def test_one_stalled_request_holds_no_other_and_waits_its_budget(
    faulty: Any, data_path: str
) -> None:
    tier, _, switch, stored, _, _ = faulty(4, start=500, data_path=data_path)
    stalled = {tier.uploader.keys.key_for(k).rsplit("/", 1)[1] for k in h.keys(4, start=600)}
    switch.fault = lambda r: "stall" if r.path.rsplit("/", 1)[1] in stalled else None
    # one step looks up both requests: vLLM's lookup thread answers a step's requests
    # one after another and posts them together
    got = verdicts(tier, {"stalled": h.keys(4, start=600), "healthy": stored})
    assert got["healthy"].hits == 4 and got["healthy"].seconds < SLACK, got
    assert got["stalled"].hits == 0 and got["stalled"].seconds <= BUDGET + SLACK, got
    assert tier._lookup_manager.skipped["budget"] == 4


@pytest.mark.parametrize("data_path", ["crt", "botocore"])
def test_a_stalled_load_is_cancelled_at_the_budget_and_writes_nothing(
    faulty: Any, data_path: str
) -> None:
    tier, _, switch, ks, _, rows = faulty(4, start=520, data_path=data_path)
    switch.fault = lambda r: "stall" if h.is_load(r) else None
    started = time.monotonic()  # the request's budget starts with its first lookup
    assert h.lookup(tier, ks) == [LookupResult.HIT] * 4
    tier.submit_load(h.job(ks, range(4), load=True))
    (result,) = h.wait_finished(tier, timeout=30)
    took = time.monotonic() - started
    assert not result.success and took <= BUDGET + SLACK, took
    assert set(np.unique(rows[:4]).tolist()) <= {0, SENTINEL}  # nothing of a block
    assert _stat(tier, "budget_expired", "load") == 1


def test_the_breaker_stops_asking_a_failing_store_and_a_probe_finds_it_back(
    faulty: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="s3kv")
    tier, proxy, switch, stored, payload, rows = faulty(4, start=540)
    switch.fault = lambda r: "reset"  # connections reset: the store's process is gone
    down = time.monotonic()
    n = 0
    while not tier.health.is_open:
        assert time.monotonic() - down < 5, "the breaker never opened"
        n += 1
        got = verdicts(tier, {f"r{n}": h.keys(4, start=1000 + 10 * n)})
        assert got[f"r{n}"].hits == 0 and got[f"r{n}"].seconds <= BUDGET + SLACK
    opened = time.monotonic() - down
    time.sleep(0.3)  # requests in flight as it opened end (their retries stop)
    sent = len(_requests(proxy))
    for i in range(20):  # every one answered at once, and nothing sent
        got = verdicts(tier, {f"open{i}": h.keys(4, start=2000 + 10 * i)})
        assert got[f"open{i}"].hits == 0 and got[f"open{i}"].seconds < 0.2
    assert not tier.bp_detector.should_store(4)  # vLLM pins no row for it
    tier.submit_load(h.job(stored, range(4), load=True))  # a hit from before the outage
    (result,) = h.wait_finished(tier, timeout=5)
    assert not result.success
    assert len(_requests(proxy)) == sent
    assert _stat(tier, "breaker_open") == 1
    assert len(_s3kv_lines(caplog, "the store fails")) == 1

    switch.fault = lambda r: None  # the store is back
    back = time.monotonic()
    while tier.health.is_open:
        assert time.monotonic() - back < 4, "the probe never closed the breaker"
        time.sleep(0.02)
    closed = time.monotonic() - back
    assert tier.bp_detector.should_store(4)
    got = verdicts(tier, {"after": stored})
    assert got["after"].hits == 4
    assert h.run(tier, h.job(stored, range(4), load=True)).success
    assert np.array_equal(rows[:4], payload)
    assert len(_s3kv_lines(caplog, "the store answers again")) == 1
    assert _stat(tier, "breaker_open") == 0
    print(f"breaker opened {opened:.2f} s after the outage began, closed {closed:.2f} s "
          "after the store came back")


def test_the_manifest_check_never_holds_the_dispatch_thread(faulty: Any) -> None:
    tier, proxy, switch, stored, _, rows = faulty(4, start=560, io_process="off")
    switch.fault = lambda r: "stall" if r.path.endswith("/config.json") else None
    up = h.data_uploader(tier)
    up.manifest_recheck_seconds = 0.0  # due before every store job
    for i in range(4):
        fresh = h.keys(2, start=3000 + 10 * i)
        h.fill(rows, range(4, 6), seed=i)
        started = time.monotonic()
        assert h.run(tier, h.job(fresh, range(4, 6), load=False)).success
        assert h.run(tier, h.job(stored[:2], range(2), load=True)).success
        assert time.monotonic() - started < SLACK  # no job waited for the manifest's look
    looks = [r for r in proxy.seen() if r.path.endswith("/config.json")]
    assert 1 <= len(looks) <= FAST["max_attempts"]  # one re-check at a time, beside
    # a re-check that failed is not repeated on every job: the next is an interval away
    switch.fault = lambda r: "reset" if r.path.endswith("/config.json") else None
    assert up._rechecking.acquire(timeout=15)  # its last retries fail at once
    up._rechecking.release()
    up.manifest_recheck_seconds = 60.0
    before = len(proxy.seen())
    for i in range(3):
        h.fill(rows, range(4, 6), seed=10 + i)
        assert h.run(tier, h.job(h.keys(2, start=3500 + 10 * i), range(4, 6), load=False)).success
    assert not [r for r in proxy.seen()[before:] if r.path.endswith("/config.json")]


def test_a_load_that_would_not_pay_is_not_started_until_the_store_is_fast_again(
    faulty: Any,
) -> None:
    tier, proxy, switch, ks, payload, rows = faulty(4, start=580, delay=2.0)
    switch.fault = lambda r: "slow" if h.is_load(r) else None  # and the probe's reads
    assert h.lookup(tier, ks, req="first") == [LookupResult.HIT] * 4
    assert not h.run(tier, h.job(ks, range(4), load=True, req="first")).success  # budget
    h.finish(tier, "first")
    started = time.monotonic()
    assert h.lookup(tier, ks, req="second") == [LookupResult.MISS] * 4  # not worth it
    assert time.monotonic() - started < SLACK  # answered at once: vLLM recomputes
    h.finish(tier, "second")
    assert tier._lookup_manager.skipped["slow_store"] == 4

    proxy.delay = 0.0  # the store is fast again: a probe in the background finds out
    back = time.monotonic()
    n = 0
    while True:
        n += 1
        if h.lookup(tier, ks, req=f"again{n}") == [LookupResult.HIT] * 4:
            break
        h.finish(tier, f"again{n}")
        assert time.monotonic() - back < 5, "loads never resumed"
        time.sleep(0.2)
    assert h.run(tier, h.job(ks, range(4), load=True, req=f"again{n}")).success
    assert np.array_equal(rows[:4], payload)
    assert _stat(tier, "skipped_lookups", "slow_store") >= 4


def test_an_outage_of_five_minutes_at_ten_requests_a_second_logs_a_few_lines(
    faulty: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Three thousand requests, each a new prompt (lookups, then vLLM's store), against a
    store whose connections reset; the tier's log clock is advanced 0.1 s per request."""
    caplog.set_level(logging.INFO)
    tier, _, switch, _, _, _ = faulty(0, start=0)
    switch.fault = lambda r: "reset"
    clock = [time.monotonic()]
    tier._quiet.clock = lambda: clock[0]
    when: list[float] = []
    handler = logging.Handler()
    handler.emit = lambda record: when.append(clock[0])  # type: ignore[method-assign]
    for name in ("s3kv", "vllm"):
        logging.getLogger(name).addHandler(handler)
    limit = 24  # lines in any minute: "a few dozen" at most
    try:
        for i in range(3000):
            assert sum(1 for t in when if t > clock[0] - 60) <= limit, i  # fail early
            ks = h.keys(4, start=10_000 + 4 * i)
            ctx = ReqContext(req_id=f"r{i}")
            while LookupResult.RETRY in [tier.lookup(k, ctx) for k in ks]:
                tier.on_schedule_end(h.END)
                time.sleep(0.0005)
            detector = tier.bp_detector  # asked by vLLM before each store, if any
            if detector is None or detector.should_store(4):
                tier.submit_store(h.job(ks, range(4), load=False, req=f"r{i}"))
            tier.get_finished_jobs()
            h.finish(tier, f"r{i}")
            clock[0] += 0.1
    finally:
        for name in ("s3kv", "vllm"):
            logging.getLogger(name).removeHandler(handler)
    per_minute = np.bincount([int((t - when[0]) // 60) for t in when]) if when else [0]
    assert max(per_minute) <= limit, (list(per_minute), [r.getMessage() for r in caplog.records])
    print(f"log lines per minute of the outage: {list(per_minute)}")
    assert tier.health.is_open


def test_the_docs_say_the_defaults_the_code_has() -> None:
    from pathlib import Path

    from s3kv.vllm import _budget, _cost, _health, _logs, _wiring

    docs = (Path(__file__).resolve().parents[2] / "docs" / "vllm-tier.md").read_text()
    table = docs[docs.index("## On a bad day"):docs.index("- **A wait budget per request.**")]
    first, longest = _health.PROBE_SECONDS
    timeouts = _wiring.TIER_TIMEOUTS
    for row in (
        f"| {_budget.DEFAULT_WAIT_BUDGET_SECONDS:g} s | `wait_budget_seconds` |",
        f"| {_health.BREAKER_FAILURES}, over {_health.BREAKER_SECONDS:g} s | `breaker_failures`",
        f"| {first:g} s, growing to {longest:g} s |",
        f"| {_health.WRITE_PAUSE_SECONDS:g} s, then one block |",
        f"| {_cost.MARGIN:.0%} of the budget left |",
        f"| {timeouts['connect_timeout_seconds']:g} s / {timeouts['read_timeout_seconds']:g} s |",
        f"| {_logs.QUIET_SECONDS:g} s (the breaker's and the pause's lines: "
        f"{_logs.CHANGE_SECONDS:g} s)",
    ):
        assert row in table, row
