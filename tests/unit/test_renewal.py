"""s3kv.renewal.Renewer on an in-memory store: what is renewed, when, in which order."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone

import pytest

from s3kv import AccessDeniedError, S3Settings
from s3kv.integrity import Checksum
from s3kv.renewal import Renewer
from s3kv.stores.base import ObjectInfo, PutOptions, Store

pytestmark = pytest.mark.unit

DAY = 86_400.0
TAGS = {"s3kv-object": "block"}
SETTINGS = S3Settings(max_attempts=2, backoff_base_seconds=0.001)
CHECKSUM = Checksum("crc32c", "AAAAAA==")


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class MemoryStore(Store):
    """Objects as (Last-Modified, ETag); ``renew`` records each call, in order."""

    name = "memory"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.objects: dict[str, tuple[float, str]] = {}
        self.foreign: set[str] = set()  # written by another tool: no s3kv checksum
        self.renewals: list[str] = []
        self.heads: list[str] = []
        self.gate: threading.Event | None = None
        self.deny = False

    def add(self, key: str, age: float, etag: str = '"e"') -> ObjectInfo:
        self.objects[key] = (self.clock.now - age, etag)
        return self.info(key)

    def info(self, key: str) -> ObjectInfo:
        when, etag = self.objects[key]
        checksum = None if key in self.foreign else CHECKSUM
        return ObjectInfo(key, 1, datetime.fromtimestamp(when, timezone.utc), checksum, etag)

    def renew(
        self, key: str, *, etag: str | None, checksum: Checksum | None, tags: Mapping[str, str]
    ) -> datetime | None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.deny:
            raise AccessDeniedError("COPY: access denied")
        self.renewals.append(key)
        if key not in self.objects or self.objects[key][1] != etag:
            return None
        self.objects[key] = (self.clock.now, etag)
        return datetime.fromtimestamp(self.clock.now, timezone.utc)

    def head(self, key: str) -> ObjectInfo | None:
        self.heads.append(key)
        return self.info(key) if key in self.objects else None

    def get(self, key: str) -> tuple[bytes, ObjectInfo]:
        raise NotImplementedError

    def get_into(self, key: str, buffer: memoryview) -> ObjectInfo:
        raise NotImplementedError

    def get_range(self, key: str, *, start: int, end: int | None = None) -> bytes:
        raise NotImplementedError

    def put(self, key: str, data: object, options: PutOptions) -> bool:
        raise NotImplementedError

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        raise NotImplementedError

    def delete_many(self, keys: Sequence[str]) -> dict[str, str]:
        raise NotImplementedError


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryStore:
    return MemoryStore(clock)


@pytest.fixture
def renewer(store: MemoryStore, clock: Clock) -> Iterator[Renewer]:
    r = Renewer(store, SETTINGS, renew_after=DAY, tags=TAGS, workers=1, clock=clock)
    yield r
    r.close()


def _seen(renewer: Renewer, store: MemoryStore, ages: dict[str, float]) -> list[str]:
    for key, age in ages.items():
        renewer.observe(store.add(key, age))
    return list(ages)


def test_a_used_block_older_than_renew_after_is_renewed_once(
    renewer: Renewer, store: MemoryStore, clock: Clock
) -> None:
    (key,) = _seen(renewer, store, {"a": DAY + 1})
    for _ in range(5):  # used again and again within the threshold
        renewer.use([key])
        assert renewer.flush(5)
        clock.now += 60
    assert store.renewals == ["a"]
    assert renewer.renewed == 1
    assert store.objects["a"][0] == clock.now - 5 * 60  # Last-Modified is the renewal's
    clock.now += DAY  # a threshold later, used again: renewed again
    renewer.use([key])
    assert renewer.flush(5)
    assert store.renewals == ["a", "a"]


def test_a_fresh_block_is_not_renewed(renewer: Renewer, store: MemoryStore) -> None:
    keys = _seen(renewer, store, {"a": 10, "b": DAY - 1})
    assert renewer.use(keys) == 0
    assert renewer.flush(5)
    assert store.renewals == []


def test_a_chain_is_renewed_together_up_to_its_last_due_block_tail_first(
    renewer: Renewer, store: MemoryStore
) -> None:
    # head written first (due), then younger blocks; the tail end is fresh
    chain = _seen(renewer, store, {"h": DAY + 9, "b1": 50, "b2": DAY + 1, "t1": 5, "t2": 1})
    assert renewer.use(chain) == 3
    assert renewer.flush(5)
    # b1 is not due but comes before a due block: renewed with it, so it is never older
    # than b2; t1 and t2 (after the last due block) are left alone. Later blocks first.
    assert store.renewals == ["b2", "b1", "h"]


def test_unknown_blocks_are_skipped_unless_probed(
    renewer: Renewer, store: MemoryStore
) -> None:
    store.add("old", DAY * 2)
    store.add("new", 30)
    assert renewer.use(["old", "new", "missing"]) == 0  # nothing seen: nothing queued
    assert renewer.use(["old", "new", "missing"], probe_unknown=True) == 3
    assert renewer.flush(5)
    assert sorted(store.heads) == ["missing", "new", "old"]
    assert store.renewals == ["old"]
    assert renewer.heads == 3
    # probed keys count as asked: a second touch within the threshold sends nothing
    assert renewer.use(["old", "new"], probe_unknown=True) == 0


def test_a_changed_object_is_not_renewed_and_a_gone_one_is_reported(
    store: MemoryStore, clock: Clock
) -> None:
    gone: list[str] = []
    renewer = Renewer(store, SETTINGS, renew_after=DAY, tags=TAGS, on_gone=gone.append,
                      clock=clock)
    try:
        keys = _seen(renewer, store, {"a": DAY * 2, "b": DAY * 2})
        store.add("a", 3, etag='"other"')  # re-written since it was seen
        del store.objects["b"]  # expired since it was seen
        renewer.use(keys)
        assert renewer.flush(5)
        assert renewer.renewed == 0
        assert (renewer.changed, renewer.gone) == (1, 1)
        assert gone == ["b"]
        assert not renewer.known("b")
        assert store.objects["a"] == (clock.now - 3, '"other"')  # left as it was
    finally:
        renewer.close()


def test_use_never_waits_for_a_copy_and_the_queue_is_bounded(
    store: MemoryStore, clock: Clock
) -> None:
    store.gate = threading.Event()  # every copy hangs until released
    renewer = Renewer(store, SETTINGS, renew_after=DAY, tags=TAGS, max_pending=300,
                      workers=1, clock=clock)
    try:
        keys = _seen(renewer, store, {f"k{i}": DAY * 2 for i in range(600)})
        queued = [renewer.use(keys[i : i + 100]) for i in range(0, 600, 100)]
        # the first chunk went to the renewal thread; at most 300 more wait; the rest drop
        assert sum(queued) <= 100 + 300 + 100
        assert renewer.dropped == 600 - sum(queued)
        assert renewer.dropped > 0
        store.gate.set()
        assert renewer.flush(10)
        assert renewer.renewed == sum(queued)
    finally:
        store.gate.set()
        renewer.close()


def test_access_denied_turns_renewal_off_once(
    renewer: Renewer, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.deny = True
    keys = _seen(renewer, store, {"a": DAY * 2, "b": DAY * 2})
    renewer.use(keys[:1])
    assert renewer.flush(5)
    renewer.use(keys[1:])
    assert renewer.flush(5)
    assert renewer.failed == 1
    assert [r.message for r in caplog.records].count(
        next(r.message for r in caplog.records if "renewal is off" in r.message)
    ) == 1
    assert "writer policy" in caplog.text


def test_blocks_other_tools_wrote_are_never_renewed(
    renewer: Renewer, store: MemoryStore
) -> None:
    """Without s3kv's checksum the object's metadata is someone else's: not rewritten."""
    store.foreign.update({"theirs", "probed"})
    keys = _seen(renewer, store, {"theirs": DAY * 2, "ours": DAY * 2})
    store.add("probed", DAY * 2)
    renewer.use(keys)
    renewer.use(["probed"], probe_unknown=True)
    assert renewer.flush(5)
    assert store.renewals == ["ours"]


def test_renew_after_must_be_positive(store: MemoryStore) -> None:
    with pytest.raises(ValueError, match="renew_after must be positive"):
        Renewer(store, SETTINGS, renew_after=0, tags=TAGS)
