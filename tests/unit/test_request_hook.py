"""The store's request hook (``Store.on_request``): one event per request, with its
outcome, its payload and the attempt its retry loop sent it in."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3kv.errors import ObjectNotFoundError, SizeMismatchError, TransientStoreError
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import LocalStore, PutOptions
from s3kv.stores.base import ObjectInfo, RequestEvent
from s3kv.stores.hooks import reported


def _store(tmp_path: Path) -> tuple[LocalStore, list[RequestEvent]]:
    store = LocalStore(tmp_path)
    events: list[RequestEvent] = []
    store.on_request = events.append
    return store, events


def test_each_request_reports_its_outcome(tmp_path: Path) -> None:
    store, events = _store(tmp_path)
    assert store.put("a/b", b"hello", PutOptions()) is True
    assert store.put("a/b", b"hello", PutOptions()) is False
    info = store.head("a/b")
    assert store.head("a/c") is None
    assert store.get("a/b") == (b"hello", info)
    assert store.get_into("a/b", memoryview(bytearray(5))) == info
    with pytest.raises(ObjectNotFoundError):
        store.get("a/c")
    with pytest.raises(SizeMismatchError):
        store.get_into("a/b", memoryview(bytearray(3)))
    assert store.describe("a/b") is not None  # one HEAD, reported once
    got = [(e.operation, e.key, e.outcome, e.attempt, e.nbytes) for e in events]
    assert got == [
        ("put", "a/b", "created", 1, 5),
        ("put", "a/b", "exists", 1, 5),
        ("head", "a/b", "ok", 1, 0),
        ("head", "a/c", "not_found", 1, 0),
        ("get", "a/b", "ok", 1, 5),
        ("get", "a/b", "ok", 1, 5),
        ("get", "a/c", "not_found", 1, 0),
        ("get", "a/b", "size_mismatch", 1, 0),
        ("head", "a/b", "ok", 1, 0),
    ]
    assert [e.info for e in events if e.outcome == "ok"] == [info] * 4
    assert all(e.seconds >= 0 for e in events)


def test_arguments_by_name_are_judged_alike(tmp_path: Path) -> None:
    store, events = _store(tmp_path)
    assert store.put("k", data=b"four", options=PutOptions()) is True
    assert [(e.operation, e.outcome, e.nbytes) for e in events] == [("put", "created", 4)]


def test_without_a_hook_nothing_is_reported(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    assert store.on_request is None
    assert store.put("k", b"x", PutOptions()) is True  # (and nothing to call)


class _Flaky(LocalStore):
    """The first two GETs fail transiently; reported as the store's own."""

    failures = 2

    @reported
    def get(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
        if self.failures:
            self.failures -= 1
            raise TransientStoreError(f"GET {key}: 503 SlowDown")
        return super().get(key, max_bytes=max_bytes)  # reported once: by the outer call


def test_a_retry_carries_the_attempt_that_sent_it(tmp_path: Path) -> None:
    store = _Flaky(tmp_path)
    assert LocalStore.put(store, "k", b"abc", PutOptions()) is True
    events: list[RequestEvent] = []
    store.on_request = events.append
    settings = S3Settings.resolve(max_attempts=5, backoff_base_seconds=0.001)
    data, _ = with_retries(lambda: store.get("k"), settings)
    assert data == b"abc"
    assert [(e.attempt, e.outcome) for e in events] == [
        (1, "transient"), (2, "transient"), (3, "ok")
    ]
    store.head("k")  # outside any retry loop: a first attempt
    assert events[-1].attempt == 1
