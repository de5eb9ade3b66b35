"""The tier's I/O process (issue 36): where it runs, and its lifetimes and faults.

Loads and stores run in a process of its own that maps the primary tier's rows (a
``MAP_SHARED`` file, as vLLM's ``SharedOffloadRegion``); where the rows cannot be shared
the same data path runs in-process. A job is reported only once no request of it can
touch the rows: a process that crashes or hangs is killed and confirmed dead first, then
started again while the engine keeps serving; it ends with its engine; ``shutdown()``
returns once it has exited.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult

from s3kv.errors import InvalidInputError
from s3kv.vllm._io_process import HUNG_SECONDS, LOOK_SECONDS, MMAP_THRESHOLD_BYTES, IoProcessError
from s3kv.worker.channel import Channel
from tests.faults.proxy import FaultProxy, Request
from tests.vllm import harness as h

pytestmark = pytest.mark.vllm
SENTINEL = 0x5A
SLOW = {"read_timeout_seconds": 30.0, "wait_budget_seconds": 60.0, "max_attempts": 2,
        "backoff_base_seconds": 0.01}
"""Requests that stall stay in flight (the proxy holds them) until the test acts."""


def _alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet reaped by its new parent, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _maps_inode(pid: int, inode: int) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return any(line.split()[4] == str(inode) for line in f if len(line.split()) > 4)


@pytest.fixture
def proxied(moto_server: str, bucket: str) -> Iterator[Any]:
    """``proxied(n, start, rule, **options)``: ``n`` blocks stored straight at moto, then
    a tier through a fault proxy: ``(tier, proxy, keys, payload, rows)``."""
    made: list[tuple[Any, FaultProxy]] = []

    def make(n: int, start: int, rule: Any, **options: Any) -> Any:
        view, array = h.primary_view()
        writer = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/kv", endpoint_url=moto_server)
        ks = h.keys(n, start=start)
        try:
            h.fill(array, range(n), seed=start)
            assert h.run(writer, h.job(ks, range(n), load=False)).success
        finally:
            writer.shutdown()
        payload = array[:n].copy()
        proxy = FaultProxy(moto_server, rule)
        view, rows = h.primary_view()
        rows[:] = SENTINEL
        tier = h.s3_tier(view, h.spec(), url=f"s3://{bucket}/kv", endpoint_url=proxy.url,
                         **{**SLOW, **options})
        made.append((tier, proxy))
        return tier, proxy, ks, payload, rows

    yield make
    for tier, proxy in made:
        tier.shutdown()
        proxy.close()


class Gate:
    """A proxy rule that stalls block reads (or writes) while closed."""

    def __init__(self, method: str) -> None:
        self.method, self.closed = method, True

    def __call__(self, request: Request) -> str | None:
        if not self.closed or not request.is_block or request.method != self.method:
            return None
        return "stall" if self.method == "PUT" or h.is_load(request) else None


def _wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _io(tier: Any) -> Any:
    return tier._runner.io


# -- where it runs ------------------------------------------------------------------------


def test_loads_and_stores_run_in_a_process_that_maps_the_rows(
    make_tier: Any, caplog: pytest.LogCaptureFixture
) -> None:
    view, array = h.primary_view()
    with caplog.at_level(logging.INFO, "s3kv.vllm"):
        tier = make_tier(view, h.spec())
    io = _io(tier)
    assert tier.io_mode == "io-process" and io.pid != os.getpid() and _alive(io.pid)
    assert f"run in an I/O process (pid {io.pid})" in caplog.text  # said once, at start
    # it maps the very file the engine's rows are in
    region_inode = os.fstat(io._plan.pieces[0].fd).st_ino
    assert _maps_inode(io.pid, region_inode)
    ks = h.keys(4, start=9000)
    h.fill(array, range(4), seed=9)
    assert h.run(tier, h.job(ks, range(4), load=False)).success
    assert h.lookup(tier, ks) == [LookupResult.HIT] * 4
    assert h.run(tier, h.job(ks, range(4, 8), load=True)).success
    assert np.array_equal(array[4:8], array[0:4])  # written by the other process


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(): v.decode() for k, v in pairs}


def test_the_process_takes_large_bodies_from_its_heap_unless_the_operator_says_otherwise(
    make_tier: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # glibc maps every allocation over its threshold afresh (a page fault per 4 KiB, an
    # unmap at free); the process raises it over any body awscrt hands it (at most 8 MiB
    # a request, 32 MiB before; measured slower without it) ...
    tier = make_tier(h.primary_view()[0], h.spec())
    env = _environ(_io(tier).pid)
    assert int(env["MALLOC_MMAP_THRESHOLD_"]) == MMAP_THRESHOLD_BYTES > 32 * 1024 * 1024
    # ... and an operator's own setting is theirs
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "1048576")
    tier = make_tier(h.primary_view()[0], h.spec())
    assert _environ(_io(tier).pid)["MALLOC_MMAP_THRESHOLD_"] == "1048576"


def test_rows_no_other_process_can_map_run_in_process(
    make_tier: Any, caplog: pytest.LogCaptureFixture
) -> None:
    view, array = h.primary_view(shared=False)  # an anonymous mapping: nobody else's
    with caplog.at_level(logging.INFO, "s3kv.vllm"):
        tier = make_tier(view, h.spec())
    assert tier.io_mode == "in-process"
    said = [r.getMessage() for r in caplog.records if "EngineCore's process" in r.getMessage()]
    assert len(said) == 1 and "no descriptor" in said[0], said
    ks = h.keys(2, start=9100)
    h.fill(array, range(2), seed=1)
    assert h.run(tier, h.job(ks, range(2), load=False)).success
    assert h.lookup(tier, ks) == [LookupResult.HIT] * 2
    assert h.run(tier, h.job(ks, range(2, 4), load=True)).success
    assert np.array_equal(array[2:4], array[0:2])


def test_io_process_on_refuses_rows_it_cannot_share_and_off_never_starts_one(
    make_tier: Any,
) -> None:
    view, _ = h.primary_view(shared=False)
    with pytest.raises(IoProcessError, match="io_process is on, but the rows are mapped"):
        make_tier(view, h.spec(), io_process="on")
    view, _ = h.primary_view()
    assert make_tier(view, h.spec(), io_process="off").io_mode == "in-process"
    with pytest.raises(InvalidInputError, match="io_process 'sometimes' is not one of"):
        make_tier(view, h.spec(), io_process="sometimes")


def test_polling_reads_the_socket_only_when_the_process_rang(
    make_tier: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM calls get_finished_jobs on every scheduler step; a socket read per step
    released the GIL that often, and EngineCore's lookup threads starved (a real
    engine's new prompts waited out the whole 2.5 s budget)."""
    view, array = h.primary_view()
    tier = make_tier(view, h.spec())
    reads = 0
    receive = Channel.receive

    def counted(self: Channel) -> list[object]:
        nonlocal reads
        reads += 1
        return receive(self)

    monkeypatch.setattr(Channel, "receive", counted)
    started, polls = time.monotonic(), 0
    while time.monotonic() - started < 0.5:
        assert tier.get_finished_jobs() == []
        polls += 1
    assert polls > 1000 and reads <= 0.5 / LOOK_SECONDS + 2, (polls, reads)
    # a reply rings: it is read at the next poll, not at the next look
    ks = h.keys(2, start=9050)
    h.fill(array, range(2), seed=5)
    tier.submit_store(h.job(ks, range(2), load=False))
    (result,) = h.wait_finished(tier, timeout=10)
    assert result.success


# -- faults ---------------------------------------------------------------------------------


def test_a_worker_killed_mid_load_fails_the_load_and_the_next_hit_uses_a_new_one(
    proxied: Any,
) -> None:
    gate = Gate("GET")
    tier, proxy, ks, payload, rows = proxied(4, 9200, gate)
    io = _io(tier)
    first = io.pid
    assert h.lookup(tier, ks) == [LookupResult.HIT] * 4
    tier.submit_load(h.job(ks, range(4), load=True))
    _wait_for(lambda: len([r for r in proxy.seen("GET", blocks=True) if h.is_load(r)]) >= 4,
              10, "the loads never reached the store")
    os.kill(first, signal.SIGKILL)
    (result,) = h.wait_finished(tier, timeout=10)
    assert not result.success and not result.successful_keys  # vLLM recomputes them
    assert not _alive(first) and set(np.unique(rows[:4]).tolist()) <= {0, SENTINEL}
    gate.closed = False
    # the engine keeps serving: the next hit is loaded by a new process
    deadline = time.monotonic() + 15
    while True:
        ok = h.run(tier, h.job(ks, range(4), load=True, req="again"))
        if ok.success or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # refused while the new one starts (after its backoff)
    assert ok.success and np.array_equal(rows[:4], payload)
    assert io.pid != first and _alive(io.pid) and io.restarts == 1
    assert "was killed by signal 9" in io.deaths[-1]


def test_a_worker_killed_mid_store_fails_the_store_and_the_next_one_lands(
    proxied: Any, s3_client: Any, bucket: str
) -> None:
    gate = Gate("PUT")
    tier, proxy, _, _, rows = proxied(0, 9300, gate)
    io = _io(tier)
    first = io.pid
    fresh = h.keys(3, start=9310)
    h.fill(rows, range(3), seed=3)
    tier.submit_store(h.job(fresh, range(3), load=False))
    _wait_for(lambda: len(proxy.seen("PUT", blocks=True)) >= 3, 10, "no PUT reached the store")
    os.kill(first, signal.SIGKILL)
    (result,) = h.wait_finished(tier, timeout=10)
    assert not result.success
    gate.closed = False
    deadline = time.monotonic() + 15
    while not h.run(tier, h.job(fresh, range(3), load=False)).success:
        assert time.monotonic() < deadline, "no new I/O process stored the blocks"
        time.sleep(0.2)
    listed = {o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert {tier.uploader.keys.key_for(k) for k in fresh} <= listed
    assert io.pid != first


def test_a_hung_worker_is_killed_and_its_load_fails_within_seconds(proxied: Any) -> None:
    gate = Gate("GET")
    tier, proxy, ks, _, rows = proxied(2, 9400, gate)
    io = _io(tier)
    first = io.pid
    assert h.lookup(tier, ks) == [LookupResult.HIT] * 2
    tier.submit_load(h.job(ks, range(2), load=True))
    _wait_for(lambda: len([r for r in proxy.seen("GET", blocks=True) if h.is_load(r)]) >= 2,
              10, "the loads never reached the store")
    os.kill(first, signal.SIGSTOP)  # alive, holding its jobs, answering nothing
    started = time.monotonic()
    try:
        (result,) = h.wait_finished(tier, timeout=HUNG_SECONDS + 10)
    finally:
        if _alive(first):
            os.kill(first, signal.SIGKILL)
    took = time.monotonic() - started
    assert not result.success
    assert took < HUNG_SECONDS + 5, took  # a recompute, not the store's 30 s timeout
    assert not _alive(first)  # killed and confirmed dead before the job was failed
    assert "stopped answering" in io.deaths[-1]
    assert set(np.unique(rows[:2]).tolist()) <= {0, SENTINEL}


def test_shutdown_with_loads_in_flight_returns_once_no_byte_can_reach_the_rows(
    proxied: Any,
) -> None:
    trickle = lambda r: "trickle" if h.is_load(r) else None  # noqa: E731
    tier, proxy, ks, _, rows = proxied(2, 9500, trickle)
    proxy.delay = 0.002  # a byte every 2 ms: each row fills for minutes
    io = _io(tier)
    pid = io.pid
    assert h.lookup(tier, ks) == [LookupResult.HIT] * 2
    tier.submit_load(h.job(ks, range(2), load=True))
    _wait_for(lambda: len([r for r in proxy.seen("GET", blocks=True) if h.is_load(r)]) >= 2,
              10, "the loads never reached the store")
    time.sleep(0.5)  # bytes are arriving
    tier.shutdown()
    assert not _alive(pid)
    after = rows.copy()
    time.sleep(1.0)  # the proxy goes on sending: nothing of it may land
    assert np.array_equal(rows, after)


ENGINE = textwrap.dedent("""
    import sys, time
    from tests.vllm import harness as h
    view, _ = h.primary_view()
    tier = h.s3_tier(view, h.spec(), url=sys.argv[1], endpoint_url=sys.argv[2])
    print(tier._runner.io.pid, flush=True)
    time.sleep(600)
""")


def test_the_worker_ends_within_a_second_of_its_engine(moto_server: str, bucket: str) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    engine = subprocess.Popen([sys.executable, "-c", ENGINE, f"s3://{bucket}/kv", moto_server],
                              stdout=subprocess.PIPE, cwd=root, env=env)  # fmt: skip
    try:
        assert engine.stdout is not None
        worker = int(engine.stdout.readline())
        assert _alive(worker)
        engine.kill()  # SIGKILL: no shutdown, no atexit
        engine.wait()
        killed = time.monotonic()
        _wait_for(lambda: not _alive(worker), 1.0, "the worker outlived its engine by 1 s")
        assert time.monotonic() - killed < 1.0
    finally:
        engine.kill()
        engine.wait()
        if engine.stdout is not None:
            engine.stdout.close()
