"""Walking a cache's listing: every key parsed once, strays set apart.

``push``, ``pull``, ``cp``, ``ls``, ``verify``, ``gc`` and ``repair`` all start here. A
listing is streamed page by page, never held whole, so memory stays flat however many
blocks a prefix holds. A key is trusted only once :func:`s3kv.parse_key` accepts it;
anything else is a *stray* key: counted, shown, never copied, never turned into a path.

One meaning of a location for every command: it holds the namespaces whose folders sit
directly under it. A key of a cache nested deeper (``<location>/team/<folder>/...``) is
in the layout but belongs to another location: it is *nested*, never copied, checked or
deleted from here, and :mod:`s3kv.ops.scope` names that location.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from s3kv.errors import NotAnS3KVKeyError
from s3kv.naming.keys import join_prefix
from s3kv.naming.location import Location
from s3kv.naming.parse import ParsedKey, parse_key
from s3kv.stores import ObjectInfo, Store
from s3kv.stores.local import temp_target

MAX_EXAMPLES = 100
"""Stray keys (and similar) shown by name in a report; the rest are only counted."""
GC_LEASE_NAME = ".s3kv-gc-lease"
"""The lease a running gc holds directly under a location's prefix (s3kv.ops.gc.lease):
not data, never a stray key, skipped by every listing (at any depth: a listing of the
bucket sees the leases of gc runs on its prefixes)."""
STALE_TEMP_SECONDS = 15 * 60
"""A temp file of a write (``<block>.bin_<token>.tmp``) older than this belongs to a
write that died between write and rename: no write of one block takes this long."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One listed object: parsed, or stray with the reason."""

    info: ObjectInfo
    parsed: ParsedKey | None
    reason: str = ""
    temp: bool = False
    """Not a stray: a temp file of a write in progress, or of one that died before its
    rename (``parsed`` is None). Never copied; ``verify`` names stale ones, ``gc``
    removes them."""
    nested: ParsedKey | None = None
    """Not a stray: a key of a cache nested below the location (``parsed`` is None),
    parsed against its own prefix."""


def root_of(prefix: str) -> str:
    """What precedes a namespace folder in keys written under ``prefix``."""
    return join_prefix(prefix, "")


def list_root(location: Location) -> str:
    """The listing prefix of a location: its prefix and a ``/``."""
    return root_of(location.prefix)


def walk(store: Store, location: Location) -> Iterator[Entry]:
    """Every object under the location, in listing order, parsed.

    A key of a cache nested deeper (``prefix/other/<folder>/...``) comes back ``nested``,
    not parsed: copying it would flatten two caches into one, and deleting or checking it
    from here would act on another location.
    """
    for info in store.list(list_root(location)):
        if info.key.rpartition("/")[2] == GC_LEASE_NAME:
            continue
        try:
            parsed = parse_key(info.key)
        except NotAnS3KVKeyError as exc:
            target = _temp_target(info.key)
            if target is not None and target.prefix != location.prefix:
                yield Entry(info, None, "a temp file of a nested cache", nested=target)
            else:
                yield Entry(info, None, str(exc), temp=target is not None)
            continue
        if parsed.prefix != location.prefix:
            yield Entry(
                info,
                None,
                f"{info.key!r} belongs to the cache under prefix {parsed.prefix!r}, not "
                f"{location.prefix!r}",
                nested=parsed,
            )
            continue
        yield Entry(info, parsed)


def _temp_target(key: str) -> ParsedKey | None:
    """The parsed key a temp file will be published as; None if ``key`` is no temp file."""
    target = temp_target(key)
    if target is None:
        return None
    try:
        return parse_key(target)
    except NotAnS3KVKeyError:
        return None


def child_names(store: Store, parent: str) -> Iterator[str]:
    """The first-level names under ``parent`` (a listing prefix ending in ``/``), in key
    order, one request each however much lies below each: after a name, the listing
    restarts past everything under it (``<name>/`` sorts just before ``<name>0``)."""
    after: str | None = None
    while True:
        listing = store.list(parent, start_after=after)
        info = next(listing, None)
        close = getattr(listing, "close", None)
        if close is not None:
            close()
        if info is None:
            return
        name, sep, _ = info.key[len(parent) :].partition("/")
        yield name
        after = f"{parent}{name}0" if sep else info.key


def usual_size(sizes: Mapping[int, int]) -> int | None:
    """The block size of a namespace and rank from ``{size: count}`` of its blocks: the
    most common one (the CPU row stride); on a tie the larger (a short object is the
    usual corruption). 0-byte blocks never count (no block is empty); None if no other."""
    counted = [(n, size) for size, n in sizes.items() if size > 0]
    return max(counted)[1] if counted else None


class SortedPresence:
    """Which relative paths exist under a destination root, from one sorted listing.

    Queries arrive in the order the source was listed, which is key order, so the
    destination is listed alongside in a single pass (a merge join): memory stays flat
    and a re-run costs one listing, not one HEAD per block. A query behind the cursor
    (a source mixing key styles) reopens the listing at that key with ``start_after``.
    Answers only save requests; writes are create-only, so a wrong "absent" costs one
    redundant request and never an overwrite.
    """

    def __init__(self, store: Store, root: str) -> None:
        self.store = store
        self.root = root
        self.listings = 0
        self._items: Iterator[ObjectInfo] | None = None
        self._current: ObjectInfo | None = None
        self._last = ""

    def size_of(self, relative: str) -> int | None:
        """The size of ``root + relative`` if it exists, else None."""
        key = self.root + relative
        if self._items is None or key < self._last:
            self._open(key)
        self._last = key
        while self._current is not None and self._current.key < key:
            self._current = next(self._items, None)  # type: ignore[arg-type]
        if self._current is not None and self._current.key == key:
            return self._current.size
        return None

    def _open(self, key: str) -> None:
        # start_after is exclusive: start just before the key (no key sorts between).
        self.listings += 1
        self._items = self.store.list(self.root, start_after=key[:-1] or None)
        self._current = next(self._items, None)
