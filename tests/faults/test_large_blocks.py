"""Large blocks on the awscrt data path: each ranged part of a GET is one request that
awscrt reads into its pooled buffer and s3kv copies into the caller's row (without the
GIL), and a PUT's body is copied from it. The same faults as everywhere (stalls, resets,
short and flipped bodies, web pages, empty answers, oversized objects, throttling, an
object changed between parts, lost answers, a store without tags, cancel) must end the
same way: retried within the
deadline or failed with the reason, the row zeroed, nothing written afterwards.

Blocks here are 8 MiB (two 4 MiB parts when the job is small), seeded once per test.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from s3kv import Downloader
from s3kv.integrity import compute
from s3kv.naming.keys import KeyMapper
from s3kv.stores.crt_get import MIN_PART_BYTES
from tests.faults.conftest import NS, READ, rows, seed_blocks, settings
from tests.faults.proxy import HUGE, once_per_block

BIG = 2 * MIN_PART_BYTES  # 8 MiB: two ranged parts in a job of a few blocks


def big_rows(n: int, seed: int = 0) -> np.ndarray:
    return rows(n, seed=seed, size=BIG)


def seed(url: str, moto_server: str, n: int) -> tuple[list[bytes], np.ndarray]:
    ks = seed_blocks(url, moto_server, n, size=BIG)
    return ks, big_rows(n)


def load(url: str, endpoint: str, ks: list[bytes], **overrides: Any) -> tuple[Any, np.ndarray]:
    out = np.full((len(ks), BIG), 7, dtype=np.uint8)
    with Downloader(url, NS, settings=settings(endpoint, "crt", **overrides)) as down:
        report = down.get_blocks(ks, into=list(out))
    return report, out


def block_gets(p: Any) -> list[Any]:
    return p.seen("GET", blocks=True)


def test_a_few_large_blocks_load_as_ranged_parts_byte_for_byte(
    proxy: Any, bucket: str, moto_server: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks, want = seed(url, moto_server, 3)
    p = proxy()
    report, out = load(url, p.url, ks)
    assert report.ok and len(report.done) == 3 and report.unverified == 0
    assert np.array_equal(out, want)
    ranges = sorted(r.header("range") or "" for r in block_gets(p))
    # 3 blocks for 8 connections: two 4 MiB parts each, no whole-object GET
    assert ranges == sorted([f"bytes=0-{MIN_PART_BYTES - 1}",
                             f"bytes={MIN_PART_BYTES}-{BIG - 1}"] * 3)


def test_many_large_blocks_load_whole_one_request_each(
    proxy: Any, bucket: str, moto_server: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks, want = seed(url, moto_server, 9)
    p = proxy()
    report, out = load(url, p.url, ks, concurrency=4)
    assert report.ok and np.array_equal(out, want)
    gets = block_gets(p)
    # one request per block, for exactly the block's bytes
    assert len(gets) == 9 and {r.header("range") for r in gets} == {f"bytes=0-{BIG - 1}"}


@pytest.mark.parametrize("fault", ["reset", "reset-mid", "short", "stall-headers", "stall"])
def test_a_part_that_fails_once_is_read_again(
    proxy: Any, bucket: str, moto_server: str, fault: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks, want = seed(url, moto_server, 2)
    failed: set[str] = set()  # the second part of each block fails on its first attempt

    def rule(r: Any) -> str | None:
        second = (r.header("range") or "").startswith(f"bytes={MIN_PART_BYTES}-")
        if r.is_block and r.method == "GET" and second and r.path not in failed:
            failed.add(r.path)
            return fault
        return None

    p = proxy(rule, cut_after=100_000)
    started = time.monotonic()
    report, out = load(url, p.url, ks)
    took = time.monotonic() - started
    assert report.ok, report.failed
    assert np.array_equal(out, want)
    assert len(p.injected(fault)) == 2
    assert took < 3 * (READ + 0.5) + 2  # a stalled part waits one read timeout, not more


def test_a_flipped_byte_is_read_again_and_damage_is_refused(
    proxy: Any, bucket: str, moto_server: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks, want = seed(url, moto_server, 2)
    p = proxy(once_per_block("flip", "GET"))
    report, out = load(url, p.url, ks)
    assert report.ok and np.array_equal(out, want)
    p2 = proxy(lambda r: "flip" if r.is_block and r.method == "GET" else None)
    report, out = load(url, p2.url, ks)
    assert len(report.failed) == 2 and not out.any()  # refused, and the rows zeroed
    assert all("checksum" in why for why in report.failed.values())


def test_an_oversized_object_is_refused_unread(
    proxy: Any, bucket: str, moto_server: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks, _ = seed(url, moto_server, 2)
    p = proxy(lambda r: "huge" if r.is_block else None)
    report, out = load(url, p.url, ks)
    assert len(report.failed) == 2 and not out.any()
    assert all(f"{HUGE} bytes" in why for why in report.failed.values()), report.failed
    assert max(r.sent for r in block_gets(p)) < 2 * BIG  # hung up at the headers


@pytest.mark.parametrize("fault", ["html", "empty"])
def test_an_answer_that_is_not_s3_is_no_block(
    proxy: Any, bucket: str, moto_server: str, fault: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks, _ = seed(url, moto_server, 1)
    p = proxy(lambda r: fault if r.is_block and r.method == "GET" else None)
    report, out = load(url, p.url, ks, max_attempts=2)
    assert len(report.failed) == 1 and not out.any()
    (why,) = report.failed.values()
    assert p.url in why and "not an S3 answer" in why, why


def test_throttling_is_retried_after_the_time_the_store_asks(
    proxy: Any, bucket: str, moto_server: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks, want = seed(url, moto_server, 1)
    # 429: awscrt retries 500 and 503 itself and hands back no Retry-After for them
    # (docs/operations.md); 429 comes back with it.
    p = proxy(once_per_block("429", "GET"), retry_after=0.6)
    started = time.monotonic()
    report, out = load(url, p.url, ks)
    assert report.ok and np.array_equal(out, want)
    assert time.monotonic() - started >= 0.6  # Retry-After honoured on this path too


def test_a_block_rewritten_between_its_parts_is_read_again(
    proxy: Any, bucket: str, moto_server: str, s3: Any
) -> None:
    url = f"s3://{bucket}/kv"
    ks, _ = seed(url, moto_server, 1)
    key = KeyMapper(NS, prefix="kv").key_for(ks[0])
    newer = big_rows(1, seed=9)[0]
    checksum = compute("crc32c", memoryview(newer))
    rewritten = threading.Event()

    def rule(r: Any) -> str | None:
        if r.is_block and r.method == "GET" and (r.header("range") or "").startswith(
            f"bytes={MIN_PART_BYTES}-"
        ) and not rewritten.is_set():
            rewritten.set()  # someone rewrites the block after its first part was served
            s3.put_object(Bucket=bucket, Key=key, Body=newer.tobytes(),
                          Metadata={"s3kv-checksum": checksum.header()})
        return None

    p = proxy(rule)
    report, out = load(url, p.url, ks)
    assert report.ok, report.failed
    assert np.array_equal(out[0], newer)  # never half old, half new
    assert len(block_gets(p)) > 2


def test_cancel_ends_a_stalled_load_at_once_and_nothing_lands_after(
    proxy: Any, bucket: str, moto_server: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks, _ = seed(url, moto_server, 2)
    p = proxy(lambda r: "stall-headers" if r.is_block and r.method == "GET" else None)
    out = np.full((2, BIG), 7, dtype=np.uint8)
    with Downloader(url, NS, settings=settings(p.url, "crt", read_timeout_seconds=30)) as down:
        job = down.submit_get_blocks(ks, into=list(out))
        time.sleep(0.5)
        started = time.monotonic()
        job.cancel()
        report = job.wait(5)
        took = time.monotonic() - started
    # at once, not the 30 s read timeout (room for a loaded CI box's stalls)
    assert took < 5.0 and len(report.failed) == 2
    assert all("cancel" in why for why in report.failed.values())
    assert not out.any()
    time.sleep(0.3)
    assert not out.any()  # nothing written after the job ended


def test_an_endpoint_under_a_path_carries_it_on_block_gets(
    proxy: Any, bucket: str, moto_server: str
) -> None:
    url = f"s3://{bucket}/kv"
    ks, want = seed(url, moto_server, 2)
    p = proxy(strip_prefix="/gw")
    assert p.url.endswith("/gw")  # the proxy's URL names the gateway's path
    report, out = load(url, p.url, ks)
    assert report.ok and np.array_equal(out, want)
    assert block_gets(p) and not p.stray  # every GET carried /gw (else 404, counted stray)


# -- stores ---------------------------------------------------------------------------


def store(url: str, endpoint: str, ks: list[bytes], data: np.ndarray, **overrides: Any) -> Any:
    from s3kv import Uploader

    with Uploader(url, NS, settings=settings(endpoint, "crt", **overrides)) as up:
        return up.put_blocks(dict(zip(ks, list(data))))


@pytest.mark.parametrize("fault", ["empty", "html", "reset", "reset-after", "503", "stall"])
def test_large_blocks_are_stored_through_a_fault_once(
    proxy: Any, bucket: str, moto_server: str, s3: Any, fault: str
) -> None:
    from tests.faults.conftest import keys

    url = f"s3://{bucket}/kv"
    ks, data = keys(3), big_rows(3, seed=4)
    p = proxy(once_per_block(fault, "PUT"))
    report = store(url, p.url, ks, data)
    # Stored, and counted so even where the first answer was lost after the write landed
    assert sorted(report.stored) == sorted(ks) and not report.failed, report.failed
    assert len(p.injected(fault)) == 3
    mapper = KeyMapper(NS, prefix="kv")
    for k, row in zip(ks, data):
        body = s3.get_object(Bucket=bucket, Key=mapper.key_for(k))["Body"].read()
        assert body == row.tobytes()


def test_a_large_put_to_a_store_without_tags_fails_fast(
    proxy: Any, bucket: str, moto_server: str
) -> None:
    from tests.faults.conftest import keys

    p = proxy(lambda r: "501" if r.method == "PUT" and r.header("x-amz-tagging") else None)
    report = store(f"s3://{bucket}/kv", p.url, keys(2), big_rows(2), max_attempts=8)
    assert len(report.failed) == 2
    assert all("S3KV_TAG_BLOCKS=false" in w for w in report.failed.values())
    assert len(p.seen("PUT", blocks=True)) == 2  # not retried


def test_cancel_ends_a_stalled_store_at_once(
    proxy: Any, bucket: str, moto_server: str
) -> None:
    from s3kv import Uploader
    from tests.faults.conftest import keys

    p = proxy(lambda r: "stall" if r.is_block and r.method == "PUT" else None)
    s = settings(p.url, "crt", read_timeout_seconds=30)
    with Uploader(f"s3://{bucket}/kv", NS, settings=s) as up:
        job = up.submit_put_blocks(dict(zip(keys(2), list(big_rows(2)))))
        time.sleep(0.5)
        started = time.monotonic()
        job.cancel()
        report = job.wait(5)
    assert time.monotonic() - started < 1.0 and len(report.failed) == 2
