"""A long-lived Uploader's manifest re-check on a store that does not answer it (issue 40):
each retries for a bounded time, and the next comes an interval after it, however it
ended (the vLLM tier's runs beside the thread that submits: tests/vllm/test_bad_day.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import s3kv.transfers.uploader as uploader_module
from s3kv import Uploader
from tests.faults.conftest import NS, keys, rows, settings
from tests.faults.proxy import FaultProxy

pytestmark = pytest.mark.integration
BOUND = 1.5


def test_a_failed_recheck_is_bounded_and_not_repeated_on_every_job(
    proxy: Callable[..., FaultProxy], bucket: str, data_path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(uploader_module, "MANIFEST_RECHECK_DEADLINE_SECONDS", BOUND)
    stalled = [False]
    p = proxy(lambda r: "stall" if stalled[0] and r.path.endswith("/config.json") else None)
    s = settings(p.url, data_path, max_attempts=30, deadline_seconds=60)
    with Uploader(f"s3://{bucket}/kv", NS, settings=s) as up:
        data = rows(6)
        up.manifest_recheck_seconds = 1.0
        assert up.put_blocks(dict(zip(keys(1), data[:1]))).ok  # creates the manifest
        stalled[0] = True
        time.sleep(1.0)  # the re-check is due
        started = time.monotonic()
        assert up.put_blocks(dict(zip(keys(1), data[1:2]))).ok  # its re-check fails
        took = time.monotonic() - started
        before = len(p.seen())
        for i in range(2, 6):  # within the interval after it: no re-check
            assert up.put_blocks(dict(zip(keys(1), data[i : i + 1]))).ok
    looks: Any = [r for r in p.seen()[before:] if r.path.endswith("/config.json")]
    assert looks == []
    # its own bound plus the attempt in flight (connect + read), not 30 attempts
    assert took <= BOUND + 2 * 0.5 + 1.0, took
