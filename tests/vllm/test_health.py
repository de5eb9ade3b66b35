"""The rules of a bad day one by one, on a clock the test holds (docs/vllm-tier.md, "On a
bad day"): the breaker's count, its probe, the write pause, the load model, the quiet log.
The same rules through vLLM's classes and a faulty wire: test_bad_day.py."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from s3kv.errors import AccessDeniedError, TransientStoreError
from s3kv.stores.base import ObjectInfo, RequestEvent
from s3kv.vllm import _cost, _health
from s3kv.vllm._cost import LoadCost
from s3kv.vllm._health import StoreHealth
from s3kv.vllm._logs import QuietLog

pytestmark = pytest.mark.vllm


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _event(outcome: str, seconds: float = 0.01, operation: str = "head", **kw: Any) -> Any:
    return RequestEvent(operation, "kv/x.bin", outcome, seconds=seconds, **kw)


def _down() -> None:
    raise TransientStoreError("no answer")


def test_failures_open_the_breaker_only_when_they_go_on() -> None:
    clock = Clock()
    health = StoreHealth(_down, clock=clock)
    for _ in range(5):  # a burst at one instant: throttled requests their retries get past
        health.on_request(_event("transient"))
    assert not health.is_open
    health.on_request(_event("ok"))  # an answer resets the count
    clock.now += 2.0
    health.on_request(_event("transient"))
    health.failure("a lookup ran out of its wait budget")
    assert not health.is_open
    clock.now += 1.0  # the third, a second after the first
    health.failure("a load ran out of its wait budget")
    assert health.is_open
    health.close()


def test_a_probe_closes_it_only_with_an_answer_in_time_and_old_failures_do_not_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_health, "PROBE_SECONDS", (0.01, 0.01))
    answers: list[Any] = [TransientStoreError("timeout"), "slow", AccessDeniedError("403")]
    changes: list[str] = []
    probed = threading.Event()

    def probe() -> None:
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if answer == "slow":
            time.sleep(0.2)  # an answer, but slower than the budget
        elif isinstance(answer, Exception):
            raise answer
        probed.set()

    health = StoreHealth(probe, fast_enough=0.1,
                         on_change=lambda change, why: changes.append(change))  # fmt: skip
    sent = time.monotonic()
    for i in range(3):
        time.sleep(0.6 if i else 0)
        health.failure("x", started=sent)
    assert health.is_open
    deadline = time.monotonic() + 5
    while health.is_open and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not health.is_open and changes == ["opened", "closed"]  # denied is an answer
    health.failure("stuck since before", started=sent)  # sent before it closed: ignored
    health.on_request(_event("transient", seconds=time.monotonic() - sent + 0.1))
    health.failure("x")
    assert health._failures == 1
    health.close()


def test_stores_pause_after_a_refused_write_then_one_block_tries() -> None:
    clock = Clock()
    changes: list[str] = []
    health = StoreHealth(lambda: None, clock=clock,
                         on_change=lambda change, why: changes.append(change))  # fmt: skip
    assert health.may_store() == "go"
    health.writes_refused("denied")
    health.writes_refused("denied")  # the rest of the job's blocks: one pause
    assert health.declines_stores() and health.may_store() == "refused"
    clock.now += _health.WRITE_PAUSE_SECONDS
    assert not health.declines_stores()
    assert health.may_store() == "trial"
    assert health.may_store() == "refused"  # one trial a pause
    health.writes_work()
    assert health.may_store() == "go" and changes == ["paused", "resumed"]


def test_the_load_model_refuses_what_would_not_end_in_time_and_forgets() -> None:
    clock = Clock()
    read = threading.Event()
    cost = LoadCost(lambda key, n: read.set(), clock=clock)
    mib = 1 << 20
    assert cost.pays(100 * mib, 1.0)  # nothing measured yet: tried
    cost.on_request(_event("ok", seconds=0.05, info=ObjectInfo("kv/x.bin", mib)))
    cost.on_load(8 * mib, 0.05 + 0.08, finished=True)  # 100 MiB/s
    assert cost.seconds(8 * mib) == pytest.approx(0.13)
    assert cost.pays(16 * mib, 1.0) and not cost.pays(100 * mib, 1.0)
    assert read.wait(2)  # the refusal measured one stream in the background
    cost.on_load(4 * mib, 2.0, finished=False)  # cancelled at its budget: at least that
    assert not cost.pays(4 * mib, 2.0)
    clock.now += _cost.MEMORY_SECONDS + 1
    assert cost.seconds(4 * mib) is None and cost.pays(4 * mib, 2.0)


def test_the_quiet_log_says_a_kind_once_in_a_while_with_what_it_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="s3kv.test")
    clock = Clock()
    quiet = QuietLog(logging.getLogger("s3kv.test"), every=30.0, clock=clock)
    for _ in range(100):
        quiet.warning("load", "load failed")
        quiet.warning("store", "store failed")
        clock.now += 0.5
    clock.now += 10.0  # 30 s after the last line of its kind
    quiet.warning("load", "load failed")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["load failed", "store failed", "load failed (and 59 more like it in the "
                     "last 30 s)", "store failed (and 59 more like it in the last 30 s)",
                     "load failed (and 39 more like it in the last 30 s)"]  # fmt: skip
