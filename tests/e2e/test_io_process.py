"""The tier's I/O process in a real engine: killed in the middle of a load, it costs that
request a recompute; the engine keeps serving, and the next hit is loaded by a new one.

One engine life (vLLM's multiprocess layout: EngineCore in a process of its own, the I/O
process its child, mapping the CPU tier's /dev/shm region) on Ceph RGW behind a fault
proxy that can hold every load's GET. The wait budget is set far above the test's
bounds, so what ends the held load is the I/O process's death, not the budget.
tests/e2e/test_engine.py shows the bytes the I/O process writes are the bytes the engine
computes with (every life there runs it: identical tokens from loaded KV).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ARTIFACTS
from tests.e2e.conftest import Endpoint
from tests.e2e.engine import Session, engine_env
from tests.faults.proxy import FaultProxy, Request

PROMPT_TOKENS = 1024
CHUNK_TOKENS = 128
BUDGET = 60.0  # far above what any step here may take: only the kill ends a held load

pytestmark = pytest.mark.timeout(900)


def _prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 4096) for _ in range(PROMPT_TOKENS)]


class Hold:
    """Holds every load (a block's GET of more than the lookups' one byte) while set."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self, request: Request) -> str | None:
        load = (request.is_block and request.method == "GET"
                and request.header("range") != "bytes=0-0")  # fmt: skip
        return "stall" if self.on and load else None


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def io_processes(engine: int) -> list[int]:
    """The running I/O processes (``python -m s3kv.worker``) below ``engine``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"s3kv.worker" not in f.read() or not _alive(pid):
                    continue
            ancestor = pid
            while ancestor > 1 and ancestor != engine:
                ancestor = _parent(ancestor)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if ancestor == engine:
            found.append(pid)
    return found


def test_an_io_process_killed_mid_load_costs_a_recompute_and_is_replaced(
    endpoint: Endpoint, tiny_model: Path, tmp_path: Path
) -> None:
    hold = Hold()
    proxy = FaultProxy(endpoint.url, hold)
    bucket = endpoint.bucket()
    tier = {**endpoint.tier(bucket, "kv"), "endpoint_url": proxy.url,
            "wait_budget_seconds": BUDGET, "read_timeout_seconds": BUDGET}  # fmt: skip
    job = {"model": str(tiny_model), "max_tokens": 8, "block_size": CHUNK_TOKENS,
           "secondary_tiers": [tier]}  # fmt: skip
    prompt = _prompt(7)
    killed: list[tuple[int, float]] = []  # (pid, when)

    def kill_once_loads_are_held(engine: int) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            held = [r for r in proxy.seen("GET", blocks=True) if r.fault == "stall"]
            workers = io_processes(engine)
            if held and len(workers) == 1:
                time.sleep(0.3)  # the load's other blocks reach the store too
                os.kill(workers[0], signal.SIGKILL)
                killed.append((workers[0], time.monotonic()))
                return
            time.sleep(0.05)

    env = engine_env(tmp_path, multiprocess=True)
    try:
        with Session(job, env=env, log_path=tmp_path / "engine.log") as s:
            (first,) = s.step([prompt], settle=2.0)["results"]  # computed, stored
            (before,) = io_processes(s.proc.pid)
            hold.on = True
            killer = threading.Thread(target=kill_once_loads_are_held, args=(s.proc.pid,))
            killer.start()
            held = s.step([prompt], reset=True, timeout=BUDGET)
            killer.join()
            hold.on = False
            (recomputed,) = held["results"]
            # the engine kept serving: a new prompt, then the hit, loaded by a new process
            s.step([_prompt(8)], reset=True)
            deadline, again = time.monotonic() + 20, None
            while time.monotonic() < deadline:
                (again,) = s.step([prompt], reset=True)["results"]
                if again["num_cached_tokens"] == PROMPT_TOKENS:
                    break
                time.sleep(0.5)  # refused while the new process starts (its backoff)
            after = io_processes(s.proc.pid)
            log = s.close()
        gone_by = time.monotonic() + 2.0  # it ended with its engine
        while any(_alive(pid) for pid in after) and time.monotonic() < gone_by:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in after)
    finally:
        proxy.close()
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "e2e-io-process.log").write_text(log)
    (victim, _) = killed[0]
    assert victim == before and not _alive(victim)
    # the held load ended with its process, long before the budget: vLLM recomputed
    assert held["seconds"] < BUDGET / 2, held["seconds"]
    assert recomputed["num_cached_tokens"] < PROMPT_TOKENS
    assert recomputed["tokens"] == first["tokens"]
    assert f"the I/O process {victim} was killed by signal 9" in log
    # a new process (the engine's child, mapping the same region) loads the next hit
    assert again is not None and again["num_cached_tokens"] == PROMPT_TOKENS, again
    assert again["tokens"] == first["tokens"]
    assert len(after) == 1 and after[0] != victim
