"""s3kv.ops.gc.renewal.Renewer on an in-memory store: what is renewed, when, how often, by whom.

The store keeps (Last-Modified, ETag, tags) per key on a fake clock, honours the copy's
Last-Modified condition as S3 and Ceph RGW do (a write since that second fails it), and
records every request, so each test counts what would be billed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone

import pytest

from s3kv import AccessDeniedError
from s3kv.errors import ObjectNotFoundError, StoreError, TransientStoreError
from s3kv.integrity import METADATA_KEY, Checksum
from s3kv.ops.gc.renewal import Renewer
from s3kv.stores.base import ObjectDetails, ObjectInfo, PutOptions, Store

pytestmark = pytest.mark.unit

DAY = 86_400.0
TAGS = {"s3kv-object": "block"}
CHECKSUM = Checksum("crc32c", "AAAAAA==")


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


class MemoryStore(Store):
    """Objects as [Last-Modified, ETag, tags]; every request recorded, in order."""

    name = "memory"

    def __init__(self, clock: Clock, *, copies_keep_tags: bool = True) -> None:
        self.clock = clock
        self.copies_keep_tags = copies_keep_tags
        self.objects: dict[str, list] = {}
        self.foreign: set[str] = set()  # written by another tool: no s3kv checksum
        self.requests: list[tuple[str, str]] = []
        self.gate: threading.Event | None = None
        self.deny = False
        self.throttle = False
        self.tagging_fails = False
        self.before_copy: dict[str, float] = {}  # key -> Last-Modified another node sets
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()

    def add(self, key: str, age: float, etag: str = '"e"') -> ObjectInfo:
        self.objects[key] = [self.clock.now - age, etag, dict(TAGS)]
        return self.info(key)

    def info(self, key: str) -> ObjectInfo:
        when, etag, _ = self.objects[key]
        checksum = None if key in self.foreign else CHECKSUM
        return ObjectInfo(key, 1, _when(when), checksum, etag)

    def copies(self, key: str | None = None) -> int:
        return sum(1 for op, k in self.requests if op == "copy" and key in (None, k))

    def ops(self, op: str) -> int:
        return sum(1 for o, _ in self.requests if o == op)

    def describe(self, key: str) -> ObjectDetails | None:
        self.requests.append(("head", key))
        if key not in self.objects:
            return None
        meta = {} if key in self.foreign else {METADATA_KEY: CHECKSUM.header()}
        return ObjectDetails(self.info(key), meta, _when(self.clock.now))

    def head(self, key: str) -> ObjectInfo | None:
        self.requests.append(("head", key))
        return self.info(key) if key in self.objects else None

    def renew(
        self, key: str, *, unmodified_since: datetime, metadata: Mapping[str, str]
    ) -> datetime | None:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                self.gate.wait(10)
            self.requests.append(("copy", key))
            if self.deny:
                raise AccessDeniedError("COPY: access denied")
            if self.throttle:
                raise TransientStoreError("COPY: 503 SlowDown")
            if key in self.before_copy:  # another node's copy lands between look and copy
                self.objects[key][0] = self.before_copy.pop(key)
            obj = self.objects.get(key)
            if obj is None or int(obj[0]) > unmodified_since.timestamp():
                return None
            assert metadata == {METADATA_KEY: CHECKSUM.header()}
            obj[0] = self.clock.now
            if not self.copies_keep_tags:
                obj[2] = {}
            return _when(self.clock.now)
        finally:
            with self._lock:
                self.in_flight -= 1

    def get_tags(self, key: str) -> dict[str, str] | None:
        self.requests.append(("get-tags", key))
        return dict(self.objects[key][2])

    def put_tags(self, key: str, tags: Mapping[str, str]) -> None:
        self.requests.append(("put-tags", key))
        if key not in self.objects:
            raise ObjectNotFoundError(f"PUT-TAGGING {key}: no such key")
        if self.tagging_fails:
            raise StoreError("PUT-TAGGING: 500 InternalError")
        self.objects[key][2] = dict(tags)

    def get(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
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


def make(store: MemoryStore, clock: Clock, **options: object) -> Renewer:
    defaults: dict[str, object] = {"renew_after": DAY, "tags": TAGS, "clock": clock,
                                   "spread": 0.0}
    return Renewer(store, **{**defaults, **options})  # type: ignore[arg-type]


@pytest.fixture
def renewer(store: MemoryStore, clock: Clock) -> Iterator[Renewer]:
    r = make(store, clock)
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
    assert store.copies() == 1
    assert renewer.renewed == 1
    assert store.objects["a"][0] == clock.now - 5 * 60  # Last-Modified is the renewal's
    clock.now += DAY  # a threshold later, used again: renewed again
    renewer.use([key])
    assert renewer.flush(5)
    assert store.copies() == 2


def test_a_fresh_block_is_not_renewed(renewer: Renewer, store: MemoryStore) -> None:
    keys = _seen(renewer, store, {"a": 10, "b": DAY - 1})
    assert renewer.use(keys) == 0
    assert renewer.flush(5)
    assert store.requests == []


def test_a_chain_is_renewed_together_up_to_its_last_due_block(
    renewer: Renewer, store: MemoryStore
) -> None:
    # head written first (due), then younger blocks; the tail end is fresh
    chain = _seen(renewer, store, {"h": DAY + 9, "b1": 50, "b2": DAY + 1, "t1": 5, "t2": 1})
    assert renewer.use(chain) == 3
    assert renewer.flush(5)
    # b1 is not due but comes before a due block: renewed with it, so it is never older
    # than b2; t1 and t2 (after the last due block) are left alone.
    assert sorted(k for op, k in store.requests if op == "copy") == ["b1", "b2", "h"]


def test_a_key_waiting_in_the_queue_is_never_queued_again(
    store: MemoryStore, clock: Clock
) -> None:
    """Loads of the same due blocks while the first renewals still wait (a slow store,
    a queue hours long): one copy per block, however often they are used."""
    store.gate = threading.Event()
    renewer = make(store, clock, workers=2, renew_after=1.0)
    try:
        keys = _seen(renewer, store, {f"k{i}": 5.0 for i in range(100)})
        assert renewer.use(keys) == 100
        for _ in range(10):  # renew_after passes again and again while they wait
            clock.now += 1.5
            renewer.use(keys)
        store.gate.set()
        assert renewer.flush(10)
        assert store.copies() == 100
        assert {store.copies(k) for k in keys} == {1}
    finally:
        store.gate.set()
        renewer.close()


def test_a_block_another_node_renewed_since_it_was_seen_is_not_copied(
    renewer: Renewer, store: MemoryStore, clock: Clock
) -> None:
    keys = _seen(renewer, store, {"a": DAY * 2, "b": DAY * 2})
    store.objects["a"][0] = clock.now - 30  # node 2 renewed "a" after this node's GET
    renewer.use(keys)
    assert renewer.flush(5)
    assert store.copies("a") == 0 and store.copies("b") == 1
    assert (renewer.already_renewed, renewer.renewed) == (1, 1)
    assert store.ops("head") == 2  # the look: one HEAD per due block, a twelfth of a copy


def test_two_nodes_looking_at_once_copy_once(renewer: Renewer, store: MemoryStore,
                                             clock: Clock) -> None:
    """Both looked before either copied: the copy's Last-Modified condition (which S3
    and RGW enforce) refuses the second."""
    (key,) = _seen(renewer, store, {"a": DAY * 2})
    store.before_copy[key] = clock.now  # the other node's copy lands after our look
    renewer.use([key])
    assert renewer.flush(5)
    assert renewer.renewed == 0 and renewer.already_renewed == 1
    assert store.objects[key][0] == clock.now  # the other node's renewal stands


def test_unknown_blocks_are_skipped_unless_probed(
    renewer: Renewer, store: MemoryStore
) -> None:
    store.add("old", DAY * 2)
    store.add("new", 30)
    assert renewer.use(["old", "new", "missing"]) == 0  # nothing seen: nothing queued
    assert renewer.use(["old", "new", "missing"], probe_unknown=True) == 3
    assert renewer.flush(5)
    assert sorted(k for op, k in store.requests if op == "head") == ["missing", "new", "old"]
    assert [k for op, k in store.requests if op == "copy"] == ["old"]
    assert renewer.heads == 3
    # probed keys count as asked: a second touch within the threshold sends nothing
    assert renewer.use(["old", "new"], probe_unknown=True) == 0


def test_a_changed_object_is_not_renewed_and_a_gone_one_is_reported(
    store: MemoryStore, clock: Clock
) -> None:
    gone: list[str] = []
    renewer = make(store, clock, on_gone=gone.append)
    try:
        keys = _seen(renewer, store, {"a": DAY * 2, "b": DAY * 2})
        store.add("a", 3, etag='"other"')  # re-written since it was seen
        del store.objects["b"]  # expired since it was seen
        renewer.use(keys)
        assert renewer.flush(5)
        assert renewer.renewed == 0 and store.copies() == 0
        assert (renewer.changed, renewer.gone) == (1, 1)
        assert gone == ["b"]
        assert not renewer.known("b")
        assert store.objects["a"][:2] == [clock.now - 3, '"other"']  # left as it was
    finally:
        renewer.close()


def test_a_chains_blocks_are_copied_concurrently_within_its_budget(
    store: MemoryStore, clock: Clock
) -> None:
    renewer = make(store, clock, workers=8, chain_budget=3)
    try:
        store.gate = threading.Event()
        keys = _seen(renewer, store, {f"c{i}": DAY * 2 for i in range(12)})
        renewer.use(keys)
        deadline = time.monotonic() + 5
        while store.in_flight < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert store.in_flight == 3  # three at once, never more, though 8 workers idle
        store.gate.set()
        assert renewer.flush(5)
        assert store.most_in_flight == 3 and renewer.renewed == 12
    finally:
        store.gate.set()
        renewer.close()


def test_use_never_waits_for_a_copy_and_the_queue_is_bounded(
    store: MemoryStore, clock: Clock
) -> None:
    store.gate = threading.Event()  # every copy hangs until released
    renewer = make(store, clock, max_pending=300, workers=1)
    try:
        keys = _seen(renewer, store, {f"k{i}": DAY * 2 for i in range(600)})
        started = time.monotonic()
        queued = [renewer.use(keys[i : i + 100]) for i in range(0, 600, 100)]
        assert time.monotonic() - started < 1.0  # never blocked on the hung store
        assert sum(queued) == 300  # three chains fit; the other three are dropped
        assert renewer.dropped == 300
        store.gate.set()
        assert renewer.flush(10)
        assert renewer.renewed == 300
    finally:
        store.gate.set()
        renewer.close()


def test_a_throttling_store_pauses_every_renewal(store: MemoryStore, clock: Clock) -> None:
    """503 SlowDown to every copy: one pause for all, doubling, not a storm of retries."""
    store.throttle = True
    renewer = make(store, clock, workers=8)
    try:
        keys = _seen(renewer, store, {f"k{i}": DAY * 2 for i in range(200)})
        renewer.use(keys)
        time.sleep(3.2)  # pauses of ~1 s, then ~2 s: two or three rounds in all
        attempts = store.copies()
        assert 1 <= attempts <= 3 * 8, attempts  # each round: at most the workers at once
        assert renewer.queue.pauses >= 2
        store.throttle = False  # the store recovers: everything drains
        assert renewer.flush(30)
        assert renewer.renewed + renewer.failed == 200
        assert renewer.renewed >= 200 - 3 * 8
    finally:
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
    assert [k for op, k in store.requests if op == "copy"] == ["ours"]


def test_a_store_whose_copies_keep_tags_is_never_re_tagged(
    renewer: Renewer, store: MemoryStore, clock: Clock
) -> None:
    keys = _seen(renewer, store, {f"k{i}": DAY * 2 for i in range(5)})
    renewer.use(keys)
    assert renewer.flush(5)
    assert renewer.renewed == 5
    assert store.ops("put-tags") == 0
    assert store.ops("get-tags") == 2  # learnt once: before and after the first copy


def test_a_store_that_drops_tags_gets_them_back_and_a_failed_re_tag_is_remembered(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore(clock, copies_keep_tags=False)  # Ceph RGW 16
    renewer = make(store, clock, workers=1)
    try:
        keys = _seen(renewer, store, {"a": DAY * 2, "b": DAY * 2})
        renewer.use(keys[:1])
        assert renewer.flush(5)
        assert store.objects["a"][2] == TAGS  # learnt that copies drop tags: put back
        store.tagging_fails = True
        with caplog.at_level(logging.WARNING, "s3kv.ops.gc.renewal"):
            renewer.use(keys[1:])
            assert renewer.flush(5)
        assert store.objects["b"][2] == {}  # renewed, tag lost: the lifecycle rule is blind
        assert (renewer.retag_failed, renewer.untagged) == (1, 1)
        assert "re-tagging" in caplog.text and "verify --tags" in caplog.text
        store.tagging_fails = False
        clock.now += 60  # used again long before it is due: re-tagged, not copied
        copies = store.copies()
        renewer.use(keys[1:])
        assert renewer.flush(5)
        assert store.objects["b"][2] == TAGS
        assert store.copies() == copies
        assert (renewer.retagged, renewer.untagged) == (1, 0)
        # a block whose re-tag failed and that expired meanwhile is simply forgotten
        store.tagging_fails = True
        clock.now += DAY * 2
        renewer.use(keys[:1])
        assert renewer.flush(5) and renewer.untagged == 1
        del store.objects["a"]
        renewer.use(keys[:1])
        assert renewer.flush(5)
        assert renewer.untagged == 0 and renewer.retag_failed == 2
    finally:
        renewer.close()


def test_blocks_renewed_while_the_tags_are_still_being_learnt_keep_them(
    clock: Clock,
) -> None:
    """Many copies at once on a store that drops tags: none is left untagged."""
    store = MemoryStore(clock, copies_keep_tags=False)
    renewer = make(store, clock, workers=8)
    try:
        keys = _seen(renewer, store, {f"k{i}": DAY * 2 for i in range(24)})
        renewer.use(keys)
        assert renewer.flush(5)
        assert renewer.renewed == 24
        assert all(store.objects[k][2] == TAGS for k in keys)
    finally:
        renewer.close()


def test_renew_after_must_be_positive(store: MemoryStore) -> None:
    with pytest.raises(ValueError, match="renew_after must be positive"):
        Renewer(store, renew_after=0, tags=TAGS)
