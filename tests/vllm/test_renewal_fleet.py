"""Renewal as a fleet lives with it (issue 28, point 1): vLLM's real classes, on the wire.

Copies are counted where they arrive: a fault proxy in front of the store records every
request (a renewal is a ``PUT`` with ``x-amz-copy-source``), so nothing the tier does
goes uncounted. ``renew_after`` is 1 s; moto lists whole seconds.

* loads of the same due blocks while their renewals still wait (a slow store) send one
  copy per block, not one per load;
* two tiers loading one due chain at the same moment send about one copy per block
  (each looks first, at a spread instant; the copy's condition stops a second renewal);
* a store that answers every copy 503 SlowDown gets a few requests, then none while the
  shared pause lasts, and loads go on at full speed meanwhile;
* Ceph RGW drops tags on copy: a failed re-tag is counted, logged, and retried at the
  block's next use (``retags{outcome}`` metric), and ``verify --tags`` lists it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from s3kv.ops.verify import verify
from s3kv.vllm._metrics import RETAGS
from tests.faults.proxy import FaultProxy, Request
from tests.vllm import harness as h

pytestmark = pytest.mark.vllm
THRESHOLD = 1.0


class Server:
    def __init__(self, name: str, url: str, access: str, secret: str) -> None:
        self.name, self.url, self.access, self.secret = name, url, access, secret
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=url, aws_access_key_id=access, aws_secret_access_key=secret,
            region_name="us-east-1", config=Config(
                s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                response_checksum_validation="when_required"))


@pytest.fixture(params=["moto-server", "rgw"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param == "rgw":
        rgw = request.getfixturevalue("rgw")
        yield Server("rgw", rgw.http_endpoint, rgw.access_key, rgw.secret_key)
    else:
        yield Server("moto", request.getfixturevalue("moto_server"), "testing", "testing")


@pytest.fixture
def moto(moto_server: str) -> Server:
    return Server("moto", moto_server, "testing", "testing")


def is_copy(request: Request) -> bool:
    return request.method == "PUT" and request.header("x-amz-copy-source") is not None


def is_retag(request: Request) -> bool:
    return request.method == "PUT" and "tagging" in request.query


class Fleet:
    """Tiers of one cache behind a fault proxy (each built through vLLM's factory)."""

    def __init__(self, server: Server, proxy: FaultProxy) -> None:
        self.server, self.proxy = server, proxy
        self.bucket = f"s3kv-fleet-{uuid.uuid4().hex[:10]}"
        server.client.create_bucket(Bucket=self.bucket)
        self.tiers: list[Any] = []
        self.rows: dict[int, Any] = {}

    def tier(self, **options: Any) -> Any:
        view, array = h.primary_view(chunks=64)
        tier = h.s3_tier(view, h.spec(chunks=64), url=f"s3://{self.bucket}/team/kv",
                         endpoint_url=self.proxy.url, access_key_id=self.server.access,
                         secret_access_key=self.server.secret, renew_after=THRESHOLD,
                         **options)
        self.tiers.append(tier)
        self.rows[id(tier)] = array
        return tier

    def store_chain(self, n: int, start: int) -> list[bytes]:
        writer = self.tier()
        ks = h.keys(n, start=start)
        h.fill(self.rows[id(writer)], range(n), seed=start)
        time.sleep(1.02 - time.time() % 1)  # just after a whole second (see test_renewal)
        assert h.run(writer, h.job(ks, list(range(n)), load=False)).success
        time.sleep(THRESHOLD + 1.1)  # every block is due
        return ks

    def close(self) -> None:
        for tier in self.tiers:
            tier.shutdown()


@pytest.fixture
def fleet(request: pytest.FixtureRequest) -> Iterator[Any]:
    made: list[tuple[Fleet, FaultProxy]] = []

    def make(server: Server, rule: Any = None, **options: Any) -> Fleet:
        proxy = FaultProxy(server.url, rule, **options)
        f = Fleet(server, proxy)
        made.append((f, proxy))
        return f

    yield make
    for f, proxy in made:
        f.close()
        proxy.close()


def _load(tier: Any, ks: list[bytes], req: str) -> None:
    rows = list(range(len(ks)))
    assert h.run(tier, h.job(ks, rows, load=True, req=req)).success


def test_loads_while_renewals_wait_send_one_copy_per_block(moto: Server, fleet: Any) -> None:
    """The issue's 3,947 copies for two loads of 1,000 due blocks: the queue took 200 s
    to drain and each load queued every block again."""
    slow_copies = lambda r: "slow" if is_copy(r) else None  # noqa: E731
    f = fleet(moto, slow_copies, delay=2.0)  # each copy answered 2 s late: a slow queue
    ks = f.store_chain(16, start=3000)
    tier = f.tier()
    loads = []
    for i in range(4):  # loaded again and again while the copies wait, past renew_after
        t0 = time.monotonic()
        _load(tier, ks, req=f"load-{i}")
        loads.append(time.monotonic() - t0)
        time.sleep(0.5)
    assert max(loads) < 2.0, loads  # no load waited for a copy (each is answered 2 s late)
    assert tier.renewer.flush(60)
    copies = [r for r in f.proxy.requests if is_copy(r)]
    assert len(copies) == len(ks)
    assert len({r.path for r in copies}) == len(ks)
    assert tier.renewer.renewed == len(ks)


def test_two_tiers_loading_one_chain_at_once_copy_about_once_per_block(
    server: Server, fleet: Any
) -> None:
    f = fleet(server)
    ks = f.store_chain(40, start=3100)
    a, b = f.tier(), f.tier()
    for tier in (a, b):  # the spread a day's renew_after gives (10 s), shortened for a test
        tier.renewer.queue.spread = 3.0
    threads = [threading.Thread(target=_load, args=(t, ks, f"both-{i}"))
               for i, t in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert a.renewer.flush(60) and b.renewer.flush(60)
    copies = [r for r in f.proxy.requests if is_copy(r)]
    assert len({r.path for r in copies}) == len(ks)  # every block renewed
    # Without the look first, each tier copies every block (2 x 40). With it, a block is
    # copied twice only when both looked before either copy landed: both copies then
    # leave within moments of each other. How many such overlaps a 3 s spread gives
    # depends on the box's latency (on CI's loaded box more than on a quiet one).
    assert len(copies) <= 1.25 * len(ks), len(copies)
    at: dict[str, list[float]] = {}
    for r in copies:
        at.setdefault(r.path, []).append(r.at)
    twice = [max(ts) - min(ts) for ts in at.values() if len(ts) > 1]
    assert all(gap < 1.0 for gap in twice), twice
    renewed = a.renewer.renewed + b.renewer.renewed
    skipped = a.renewer.already_renewed + b.renewer.already_renewed
    assert renewed + skipped == 2 * len(ks)
    if server.name == "rgw":
        # RGW refuses a copy that comes after another one (its condition is checked in
        # tests/functional/test_renew_store.py); two copies reaching it at the same moment
        # can both land: it checks the condition, then copies, with no lock between (seen
        # in a fresh-clone `make test`: one block's two copies in one millisecond, both 200).
        at_once = sum(1 for gap in twice if gap < 0.5)
        assert len(ks) <= renewed <= len(ks) + at_once, (renewed, twice)


def test_a_throttling_store_gets_a_few_copies_and_loads_go_on(
    moto: Server, fleet: Any
) -> None:
    """The issue's 7,872 attempts in 58 s against a store answering SlowDown."""
    throttle_copies = lambda r: "503" if is_copy(r) else None  # noqa: E731
    f = fleet(moto, throttle_copies)
    ks = f.store_chain(60, start=3200)
    tier = f.tier()
    started = time.monotonic()
    _load(tier, ks, req="first")
    loads = []
    while time.monotonic() - started < 4.0:  # loads meanwhile: never held up by renewal
        t0 = time.monotonic()
        _load(tier, ks, req=f"again-{len(loads)}")
        loads.append(time.monotonic() - t0)
    attempts = [r for r in f.proxy.requests if is_copy(r)]
    # pauses of about 1 s, 2 s, 4 s: at most three rounds of 8 in four seconds
    assert 1 <= len(attempts) <= 3 * 8, len(attempts)
    assert max(loads) < 2.0, loads
    assert tier.renewer.queue.pauses >= 1


def test_a_failed_re_tag_on_ceph_rgw_is_counted_logged_and_retried_at_next_use(
    rgw: Any, fleet: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server("rgw", rgw.http_endpoint, rgw.access_key, rgw.secret_key)
    failing = threading.Event()
    failing.set()
    f = fleet(server, lambda r: "500" if is_retag(r) and failing.is_set() else None)
    ks = f.store_chain(6, start=3300)
    tier = f.tier(max_attempts=1)
    with caplog.at_level(logging.WARNING, "s3kv.ops.gc.renewal"):
        _load(tier, ks, req="renew")
        assert tier.renewer.flush(30)
    assert tier.renewer.renewed == len(ks)
    assert tier.renewer.retag_failed >= 1 and tier.renewer.untagged >= 1
    assert "re-tagging" in caplog.text
    stats = tier.get_stats().data["data"]
    assert stats[RETAGS][(tier.metrics.tier, "failed")] >= 1
    url = f"s3://{f.bucket}/team/kv"
    from s3kv import S3Settings

    settings = S3Settings.resolve(endpoint_url=server.url, access_key_id=server.access,
                                  secret_access_key=server.secret)
    found = verify(url, settings=settings, tags=True)
    assert found.counts.get("untagged", 0) == tier.renewer.untagged
    failing.clear()  # the store takes tags again; the blocks are used again, not due
    _load(tier, ks, req="next-use")
    assert tier.renewer.flush(30)
    assert tier.renewer.untagged == 0 and tier.renewer.retagged >= 1
    assert verify(url, settings=settings, tags=True).counts == {}
    stats = tier.get_stats().data["data"]
    assert stats[RETAGS][(tier.metrics.tier, "repaired")] >= 1
