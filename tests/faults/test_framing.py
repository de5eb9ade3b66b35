"""An answer counts only as the answer to the request just sent (issue 26, points 2, 3, 5).

Through the fault proxy, client connections kept alive: a desynchronised connection
(another request's answer first, ``stale``) and an unsolicited extra answer (``extra``)
never put another block's bytes in a row, on either data path, at concurrency 1 and 4,
for small blocks (one request) and large ones (ranged parts); PUTs through them are
counted stored only when stored. Malformed answers (chunked, short, one byte over their
Content-Length, trailed by garbage) are retried; a body that trickles in ends within
the documented bound; a middlebox that fakes PUT answers on a store that echoes
checksums gets no block counted stored.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from s3kv import Downloader, Uploader
from s3kv.errors import TransientStoreError
from s3kv.naming.keys import KeyMapper
from tests.faults.conftest import CONNECT, NS, READ, keys, rows, seed_blocks, settings
from tests.faults.proxy import once_per_block

pytestmark = pytest.mark.integration

SMALL = 64 * 1024
LARGE = 8 * 1024 * 1024


def load(url: str, endpoint: str, ks: list[bytes], size: int, data_path: str,
         **overrides: Any) -> tuple[Any, np.ndarray]:
    out = np.full((len(ks), size), 7, dtype=np.uint8)
    with Downloader(url, NS, settings=settings(endpoint, data_path, **overrides)) as down:
        report = down.get_blocks(ks, into=list(out))
    return report, out


def later_gets(fault: str) -> Any:
    """``fault`` on the first GET of each block that is not a connection's first
    request (only a kept-alive connection has an earlier answer to replay)."""
    first = once_per_block(fault, "GET")
    return lambda r: first(r) if r.attempt == 1 else None


@pytest.mark.parametrize("fault", ["stale", "extra"])
@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["64KiB", "8MiB"])
def test_another_requests_answer_never_lands_in_a_row(
    proxy: Any, bucket: str, moto_server: str, data_path: str, fault: str, concurrency: int,
    size: int,
) -> None:
    url = f"s3://{bucket}/kv"
    n = 6
    ks = seed_blocks(url, moto_server, n, size=size)
    want = rows(n, size=size)
    p = proxy(later_gets(fault))
    report, out = load(url, p.url, ks, size, data_path, concurrency=concurrency,
                       max_attempts=6)
    assert p.injected(fault), "the proxy never replayed an answer: nothing was tested"
    # every row holds its own block's bytes, or the block failed and its row is zero:
    # never another block's
    for i, key in enumerate(ks):
        if key in report.failed:
            assert not out[i].any()
        else:
            assert np.array_equal(out[i], want[i]), f"row {i} holds other bytes"
    assert report.ok, list(report.failed.values())


def test_a_412_answering_the_look_that_settles_a_puts_412_is_retried(
    proxy: Any, bucket: str, s3: Any, data_path: str
) -> None:
    """What a desynchronised connection did in a fresh-clone make test: a refused PUT's
    412 went to the next request on the connection, the look that settles a 412, and the
    block failed. Here the proxy answers each block's first PUT 412 without storing it,
    and the look after it (a GET of one byte) 412 too: neither is the store's answer, so
    the block is tried again and stored."""
    url = f"s3://{bucket}/kv"
    n = 4
    ks, data = keys(n), rows(n, size=SMALL)
    put_first, head_first = (once_per_block("precondition", m) for m in ("PUT", "GET"))
    p = proxy(lambda r: put_first(r) or head_first(r))
    with Uploader(url, NS, settings=settings(p.url, data_path, max_attempts=4)) as up:
        report = up.put_blocks(dict(zip(ks, data)))
    assert report.ok, list(report.failed.values())
    assert sorted(report.stored) == sorted(ks)
    assert len(p.injected("precondition")) == 2 * n  # each block met both
    mapper = KeyMapper(NS, prefix="kv")
    for key, row in zip(ks, data):
        body = s3.get_object(Bucket=bucket, Key=mapper.key_for(key))["Body"].read()
        assert body == row.tobytes()


@pytest.mark.parametrize("echo", [True, False], ids=["echoing-store", "silent-store"])
@pytest.mark.parametrize("fault", ["stale", "extra"])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_puts_through_a_desynchronised_connection_count_only_what_is_stored(
    proxy: Any, bucket: str, s3: Any, data_path: str, fault: str, concurrency: int,
    echo: bool,
) -> None:
    url = f"s3://{bucket}/kv"
    n = 6
    ks, data = keys(n), rows(n, size=SMALL)
    p = proxy(lambda r: fault if r.method == "PUT" and r.is_block and r.attempt == 1
              else None, echo=echo)
    # Every first attempt meets a desynchronised connection, and a refused answer leaves
    # its own behind for the next request: attempts to spare on a loaded machine.
    s = settings(p.url, data_path, concurrency=concurrency, max_attempts=6)
    with Uploader(url, NS, settings=s) as up:
        report = up.put_blocks(dict(zip(ks, data)))
    assert p.injected(fault)
    mapper = KeyMapper(NS, prefix="kv")
    for key, row in zip(ks, data):
        if key in report.stored or key in report.already_present:
            body = s3.get_object(Bucket=bucket, Key=mapper.key_for(key))["Body"].read()
            assert body == row.tobytes()
    assert report.ok, list(report.failed.values())
    assert sorted(report.stored) == sorted(ks)


@pytest.mark.parametrize("fault", ["chunked", "garbage", "cl-short", "short"])
@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["64KiB", "8MiB"])
def test_malformed_answers_are_retried(
    proxy: Any, bucket: str, moto_server: str, data_path: str, fault: str, size: int
) -> None:
    url = f"s3://{bucket}/kv"
    ks = seed_blocks(url, moto_server, 3, size=size)
    p = proxy(once_per_block(fault, "GET"), cut_after=size // 2)
    report, out = load(url, p.url, ks, size, data_path)
    assert p.injected(fault)
    assert report.ok, report.failed
    assert np.array_equal(out, rows(3, size=size))


@pytest.mark.parametrize("fault", ["short", "cl-short", "garbage"])
def test_a_manifest_cut_short_is_a_wire_fault_retried(
    proxy: Any, bucket: str, moto_server: str, data_path: str, fault: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks = seed_blocks(url, moto_server, 2)
    hit: list[int] = []

    def rule(r: Any) -> str | None:
        if r.method == "GET" and r.path.endswith("config.json") and not hit:
            hit.append(1)
            return fault
        return None

    p = proxy(rule, cut_after=10)
    report, out = load(url, p.url, ks, 4096, data_path)
    assert hit and report.ok and np.array_equal(out, rows(2))


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["64KiB", "8MiB"])
def test_a_trickling_body_ends_within_the_bound(
    proxy: Any, bucket: str, moto_server: str, data_path: str, size: int
) -> None:
    url = f"s3://{bucket}/kv"
    ks = seed_blocks(url, moto_server, 2, size=size)
    p = proxy(lambda r: "trickle" if r.is_block and r.method == "GET" else None, delay=0.05)
    rate = 16 * 1024 * 1024  # the minimum rate: its share of the bound stays small
    attempts = 2
    started = time.monotonic()
    report, out = load(url, p.url, ks, size, data_path, max_attempts=attempts,
                       min_rate_bytes_per_second=rate, backoff_max_seconds=0.01)
    took = time.monotonic() - started
    bound = (CONNECT + READ + size / rate) * attempts
    assert len(report.failed) == 2, report
    assert not out.any()  # nothing of a trickle is left in a row
    (why, _) = report.failed.values()
    assert "no answer" in why or "within" in why, why
    # The blocks' own time holds the bound, with room for a loaded box's stalls; the
    # whole call adds the set-up (clients, manifest: 0.74 s, and once 4.4 s, seen on CI's
    # 2-core box beside a venv build). The trickle itself would last an hour.
    assert report.seconds <= bound * 1.5 + 2.0, (report.seconds, bound)
    assert took <= bound * 1.5 + 15, (took, bound)


def test_a_middlebox_faking_put_answers_gets_no_block_counted_stored(
    proxy: Any, bucket: str, s3: Any, data_path: str
) -> None:
    url = f"s3://{bucket}/kv"
    n = 12
    ks, data = keys(n + 2), rows(n + 2, size=SMALL)
    faking: list[bool] = [False]
    faked: list[str] = []
    firsts: list[str] = []

    def rule(r: Any) -> str | None:
        # The store echoes every checksum (as AWS does). Once it has, a middlebox answers
        # every third block's first PUT 200 without forwarding it (by arrival: str hashes
        # vary between runs, and once left no block faked).
        first_put = r.method == "PUT" and r.is_block and r.attempt == 1
        if faking[0] and first_put:
            firsts.append(r.path)
            if len(firsts) % 3 == 1 and len(faked) < n // 3:
                faked.append(r.path)
                return "fake-put"
        return None

    p = proxy(rule, echo=True)
    with Uploader(url, NS, settings=settings(p.url, data_path, max_attempts=4)) as up:
        assert up.put_blocks(dict(zip(ks[:2], data[:2]))).ok  # the store echoed
        faking[0] = True
        report = up.put_blocks(dict(zip(ks[2:], data[2:])))
    assert faked
    mapper = KeyMapper(NS, prefix="kv")
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    for key in report.stored:
        assert mapper.key_for(key) in listed  # counted stored: stored
    assert report.ok and len(report.stored) == n


def test_a_desync_on_the_fresh_client_is_retired_too(moto_server: str) -> None:
    """A foreign answer retires the awscrt client that carried it, once: the same
    client's other findings do not renew again, and a desync on its replacement, however
    soon, retires that one too (a time-based debounce once left it carrying its leftover
    answer to every retry: four attempts failed in 0.6 s on CI)."""
    from s3kv.stores.crt import CrtS3Store

    store = CrtS3Store("b", settings(moto_server, "crt"))
    try:
        first = store._crt
        store.echoes.foreign(TransientStoreError("stale"), first)
        second = store._crt
        assert second is not first
        store.echoes.foreign(TransientStoreError("stale"), first)  # the same client again
        assert store._crt is second
        store.echoes.foreign(TransientStoreError("stale"), second)  # at once, on the new one
        assert store._crt is not second
    finally:
        store.close()


def test_a_put_answer_replayed_before_its_own_report_ran_is_refused(
    proxy: Any, bucket: str, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first PUT's report is held up (a busy interpreter); meanwhile its connection
    carries the next PUT, which the proxy answers with the first one's answer. The ETag
    is remembered at the headers, before the connection is reused, so the replay is
    refused and retried: no block counts stored before it is."""
    from s3kv.stores import crt_call

    end = crt_call.Call.end
    held: list[int] = []

    def slow_first_end(self: Any, error: Any) -> None:
        if not held:
            held.append(1)
            time.sleep(0.5)
        end(self, error)

    monkeypatch.setattr(crt_call.Call, "end", slow_first_end)
    url = f"s3://{bucket}/kv"
    n = 8
    ks, data = keys(n), rows(n, size=SMALL)
    p = proxy(lambda r: "stale" if r.method == "PUT" and r.is_block and r.attempt == 1
              else None, delay=1.0)
    s = settings(p.url, "crt", concurrency=2, max_attempts=4)
    with Uploader(url, NS, settings=s) as up:
        report = up.put_blocks(dict(zip(ks, data)))
    # every block counted stored is in the store now, not a second later: a replayed
    # answer was refused (the block sent again) or proven by a look at the store
    mapper = KeyMapper(NS, prefix="kv")
    for key, row in zip(ks, data):
        body = s3.get_object(Bucket=bucket, Key=mapper.key_for(key))["Body"].read()
        assert body == row.tobytes()
    assert held and [r for r in p.injected("stale") if r.replayed], "nothing was replayed"
    assert report.ok, list(report.failed.values())
    assert sorted(report.stored) == sorted(ks)
