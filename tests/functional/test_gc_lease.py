"""The gc lease on the store's clock (issue 28, point 3).

* a lease's age is the store's Date minus its Last-Modified: a host 20 minutes behind
  (or a day ahead) neither lets a second gc in nor blocks every gc;
* what a lease says about time is never trusted: a body from 2020, from the year 9999,
  without a timezone, or not JSON at all, is aged like any other;
* a running gc checks its lease before every delete batch and stops once it lost it;
* ``gc --break-lease`` shows holder and age, asks (``--yes`` does not), removes.

Clocks are skewed per thread: the first gc's thread runs on a host 20 minutes behind.
In-process moto sends no Date header (the lease then falls back to this host's clock),
so the skew tests run on moto's server (and, with ``S3KV_TEST_BACKENDS``, on RGW).
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from typing import Any

import pytest

import s3kv.ops.gc.collect as gc_module
import s3kv.ops.gc.lease as lease_module
from s3kv import LeaseHeldError
from s3kv.naming.location import parse_location
from s3kv.ops.gc.collect import gc
from s3kv.ops.gc.lease import break_lease
from s3kv.transfers.listing import GC_LEASE_NAME
from tests.cli.day_two import cli
from tests.conftest import Backend
from tests.functional.test_gc_races import LATER, Hooked, _keys, _prefix, _write

pytestmark = pytest.mark.functional

SKEWS: dict[str, timedelta] = {}
"""Thread name -> how far its host's clock is off."""


class SkewedClock(datetime):
    """``datetime`` whose ``now`` is the calling thread's host clock (see SKEWS)."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
        return datetime.now(tz) + SKEWS.get(threading.current_thread().name, timedelta(0))


@pytest.fixture
def skewed_hosts(monkeypatch: pytest.MonkeyPatch) -> dict[str, timedelta]:
    monkeypatch.setattr(lease_module, "datetime", SkewedClock)
    monkeypatch.setattr(gc_module, "datetime", SkewedClock)
    SKEWS.clear()
    return SKEWS


def _lease_key(backend: Backend) -> str:
    return f"{_prefix(backend)}/{GC_LEASE_NAME}" if backend.is_s3 else GC_LEASE_NAME


def _over_http(backend: Backend) -> None:
    if backend.name == "moto":
        pytest.skip("in-process moto sends no Date header: the store's clock is unknown")


def test_a_gc_on_a_host_20_minutes_behind_keeps_its_lease(
    every_s3_backend: Backend, monkeypatch: pytest.MonkeyPatch,
    skewed_hosts: dict[str, timedelta],
) -> None:
    backend = every_s3_backend
    _over_http(backend)
    _write(backend, _keys(6))
    inside, release = threading.Event(), threading.Event()
    real_open = gc_module.open_store
    opened: list[int] = []

    def hold(*args: Any) -> None:  # the first run waits inside its first delete
        inside.set()
        assert release.wait(30)

    def open_store(loc: Any, settings: Any) -> Any:
        opened.append(1)
        store = real_open(loc, settings)
        return Hooked(store, {"delete_if_unchanged": hold}, {}) if len(opened) == 1 else store

    monkeypatch.setattr(gc_module, "open_store", open_store)
    skewed_hosts["behind"] = timedelta(minutes=-20)
    skewed_hosts["MainThread"] = timedelta(days=1)  # and the second gc's host a day ahead
    reports: list[Any] = []
    first = threading.Thread(name="behind", target=lambda: reports.append(
        gc(backend.location, older_than=0, now=LATER, settings=backend.settings)))
    first.start()
    try:
        assert inside.wait(30)
        with pytest.raises(LeaseHeldError, match=r"last written [0-9]+s ago by the store's clock"):
            gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    finally:
        release.set()
        first.join(30)
    (report,) = reports
    assert report.blocks_deleted == 6
    # a day ahead, the next gc starts at once: the lease went with its run
    again = gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    assert again.blocks_deleted == 0 and again.ok


@pytest.mark.parametrize("body", [
    {"owner": "dead-host:1:0", "expires": "2020-01-01T00:00:00+00:00"},  # a host far behind
    {"owner": "future-host:1:0", "expires": "9999-12-31T23:59:59+00:00"},  # far ahead
    {"owner": "naive-host:1:0", "expires": "2026-01-01T00:00:00"},  # no timezone
    "not json at all",
], ids=["2020", "9999", "naive", "garbage"])
def test_a_lease_is_aged_by_the_store_whatever_it_says(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, body: Any
) -> None:
    _write(backend, _keys(2))
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    backend.raw_put(_lease_key(backend), raw)
    # Written just now: it holds, whatever time it names (no TypeError, no forever).
    with pytest.raises(LeaseHeldError) as held:
        gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    message = str(held.value)
    assert "--break-lease" in message and "by the store's clock" in message
    if body == "not json at all":
        assert "unreadable lease" in message and "not one s3kv wrote" in message
    # Once it is LEASE_SECONDS old by the store's clock, its run is taken as dead.
    monkeypatch.setattr(lease_module, "LEASE_SECONDS", 1.0)
    import time

    time.sleep(2.1)
    report = gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    assert report.blocks_deleted == 2
    assert _lease_key(backend) not in backend.raw_keys()


def test_a_gc_that_lost_its_lease_stops_before_its_next_delete_batch(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(backend, _keys(6))
    monkeypatch.setattr(gc_module, "DELETE_BATCH", 2)  # three batches
    batches: list[int] = []

    def broken_after_the_first(*args: Any) -> None:
        batches.append(1)
        if len(batches) == 1:  # someone breaks the lease while the first batch runs
            held, broken = break_lease(backend.location, settings=backend.settings)
            assert held is not None and broken

    real_open = gc_module.open_store
    monkeypatch.setattr(gc_module, "open_store", lambda loc, s: Hooked(
        real_open(loc, s), {}, {"delete_if_unchanged": broken_after_the_first}))
    with pytest.raises(LeaseHeldError, match="lost its lease"):
        gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    assert len(batches) == 1  # the second batch was never sent
    blocks = [k for k in backend.raw_keys(_prefix(backend)) if k.endswith(".bin")]
    assert len(blocks) == 4


def test_break_lease_shows_the_holder_and_asks_first(
    backend: Backend, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(backend, _keys(1))
    store = gc_module.open_store(parse_location(backend.location), backend.settings)
    try:
        lease_module.GCLease(store, parse_location(backend.location), backend.settings).acquire()
    finally:
        store.close()
    _env(monkeypatch, backend)
    # Not a terminal and no --yes: refused, nothing removed.
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    refused = cli(capsys, "gc", backend.location, "--break-lease")
    assert refused.code == 2 and "--yes" in refused.err
    assert "held by" in refused.out and "ago by the store's clock" in refused.out
    assert _lease_key(backend) in backend.raw_keys()
    # A terminal: the answer decides.
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    kept = cli(capsys, "gc", backend.location, "--break-lease")
    assert kept.code == 1 and "left the lease in place" in kept.out
    assert _lease_key(backend) in backend.raw_keys()
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    gone = cli(capsys, "gc", backend.location, "--break-lease")
    assert gone.code == 0 and "removed the gc lease held by" in gone.out
    assert _lease_key(backend) not in backend.raw_keys()
    # --yes does not ask; with no lease there is nothing to break.
    again = cli(capsys, "gc", backend.location, "--break-lease", "--yes")
    assert again.code == 0 and "nothing to break" in again.out
    # and a gc runs again
    assert cli(capsys, "gc", backend.location, "--older-than", "0", "--now",
               LATER.isoformat()).code == 0


def _env(monkeypatch: pytest.MonkeyPatch, backend: Backend) -> None:
    """The backend's connection for the CLI (moto in-process needs its own data path)."""
    s = backend.settings
    if s.endpoint_url:
        monkeypatch.setenv("S3KV_ENDPOINT_URL", s.endpoint_url)
    if s.access_key_id:
        monkeypatch.setenv("S3KV_ACCESS_KEY_ID", s.access_key_id)
        monkeypatch.setenv("S3KV_SECRET_ACCESS_KEY", s.secret_access_key.get_secret_value())
    if s.ca_bundle:
        monkeypatch.setenv("S3KV_CA_BUNDLE", str(s.ca_bundle))
    monkeypatch.setenv("S3KV_DATA_PATH", s.data_path)
    monkeypatch.setenv("S3KV_MAX_ATTEMPTS", str(s.max_attempts))


def test_a_lease_expires_by_its_age_alone() -> None:
    """The rule in one line: expired once the store's Date - Last-Modified reaches it."""
    info = lease_module.LeaseInfo("x", "h (pid 1)", lease_module.LEASE_SECONDS + 1, '"e"')
    assert info.expired and "it has expired" in info.describe()
    fresh = lease_module.LeaseInfo("x", "h (pid 1)", 5, '"e"')
    assert not fresh.expired and "expires in 15m" in fresh.describe()


def test_a_long_listing_keeps_the_lease(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that lists (or reads chains) for longer than a lease lasts still holds it:
    it is written again in the background, not only before delete batches."""
    _write(backend, _keys(2))
    monkeypatch.setattr(lease_module, "LEASE_SECONDS", 2.0)
    monkeypatch.setattr(lease_module, "REFRESH_SECONDS", 0.6)
    inside, release = threading.Event(), threading.Event()

    def slow_listing(*args: Any) -> None:
        inside.set()
        assert release.wait(30)

    real_open = gc_module.open_store
    opened: list[int] = []

    def open_store(loc: Any, settings: Any) -> Any:
        opened.append(1)
        store = real_open(loc, settings)
        return Hooked(store, {"list": slow_listing}, {}) if len(opened) == 1 else store

    monkeypatch.setattr(gc_module, "open_store", open_store)
    reports: list[Any] = []
    first = threading.Thread(target=lambda: reports.append(
        gc(backend.location, older_than=0, now=LATER, settings=backend.settings)))
    first.start()
    try:
        assert inside.wait(30)
        import time

        time.sleep(4.5)  # two lease lifetimes inside one listing
        with pytest.raises(LeaseHeldError, match="another s3kv gc is running"):
            gc(backend.location, older_than=0, now=LATER, settings=backend.settings)
    finally:
        release.set()
        first.join(30)
    (report,) = reports
    assert report.blocks_deleted == 2 and report.ok
