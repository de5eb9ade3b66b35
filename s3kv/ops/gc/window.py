"""The blocks near gc's cutoff: decided as chains, and looked at again before each delete.

Far from the cutoff a block's ``Last-Modified`` decides alone. Near it (within the chain
window of the ``--older-than`` age, or of the minute ``--max-bytes`` cuts through),
two things can go wrong that a listing cannot see, and this module prevents both:

* **Beheaded chains.** A chain's blocks are written and renewed together, so their
  times say nothing of their order (:mod:`s3kv.naming.chains`). Each near block is read once
  (a HEAD: its parent, from the metadata s3kv's tier writes) and the near blocks are
  decided as a forest: a block's last use is the latest in its subtree, and they go
  least recently used first, deepest first on ties. What stays of a chain is a prefix.
* **Blocks used after the listing.** A renewal keeps the ETag, so a delete's ETag
  condition cannot see it. Right before each delete, a near block is looked at again (a
  HEAD): one whose Last-Modified moved since it was listed was used meanwhile; it stays,
  with its ancestors, and ``--max-bytes`` takes the next least recently used instead.

The HEADs are counted (``head_requests``), and so are the blocks kept because they were
used meanwhile (``used_since_listed``). A dry run reads the chains, and deletes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from s3kv.errors import S3KVError
from s3kv.naming.chains import Node, Placed, delete_order, parent_key
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import ObjectInfo, Store
from s3kv.transfers.listing import Entry

RECHECK_CHUNK = 64
"""Near blocks looked at again together, right before their deletes."""


@dataclass(slots=True)
class Near:
    """A listed block near a cutoff, and which one."""

    entry: Entry
    by_age: bool
    """Near the ``--older-than`` age."""
    by_budget: bool
    """In the window of the minute ``--max-bytes`` cuts through."""


class Window:
    """Decides the near blocks (see the module); ``delete(entry)`` queues one delete and
    ``flush()`` sends what is queued."""

    def __init__(
        self,
        store: Store,
        settings: S3Settings,
        now: datetime,
        *,
        older_than: float | None,
        quota: int,
        dry_run: bool,
    ) -> None:
        self.store, self.settings, self.now = store, settings, now
        self.older_than, self.quota, self.dry_run = older_than, quota, dry_run
        self.head_requests = self.used_since_listed = self.gone = 0
        self.kept: list[Entry] = []
        self.failures: dict[str, str] = {}

    def resolve(
        self,
        near: Sequence[Near],
        delete: Callable[[Entry], None],
        flush: Callable[[], None],
    ) -> None:
        if not near:
            return
        by_key = {n.entry.info.key: n for n in near}
        nodes = {k: node for k, node in self._read(near).items() if node is not None}
        for key in by_key.keys() - nodes.keys():
            if key in self.failures:
                self.kept.append(by_key[key].entry)
            else:
                self.gone += 1  # gone since the listing: not ours to count
        parents = {k: n.parent for k, n in nodes.items()}
        keep: set[str] = set()
        pending = delete_order(nodes.values())
        while pending:
            chunk, pending = self._next_chunk(pending, by_key, keep)
            fresh = self._look_again([by_key[p.key].entry for p, why in chunk if why != "keep"])
            for placed, why in chunk:
                entry = by_key[placed.key].entry
                if why == "keep" or placed.key in keep:
                    self.kept.append(entry)
                    continue
                now = fresh.get(placed.key, entry.info)
                if now is None:
                    self.gone += 1
                    continue
                if _moved(entry.info, now):
                    self.used_since_listed += 1
                    self.kept.append(entry)
                    _keep_ancestors(placed.key, parents, keep)
                    continue
                if why == "budget":
                    self.quota -= entry.info.size
                delete(entry)
            flush()

    def _next_chunk(
        self, pending: list[Placed], by_key: dict[str, Near], keep: set[str]
    ) -> tuple[list[tuple[Placed, str]], list[Placed]]:
        """The next blocks in delete order, each with what to do unless it moved."""
        chunk: list[tuple[Placed, str]] = []
        quota = self.quota
        taken = 0
        for i, placed in enumerate(pending):
            near = by_key[placed.key]
            why = "keep"
            if placed.key not in keep:
                age = self.now.timestamp() - placed.last_use
                if near.by_age and self.older_than is not None and age > self.older_than:
                    why = "age"
                elif near.by_budget and quota > 0:
                    why = "budget"
                    quota -= near.entry.info.size
            chunk.append((placed, why))
            taken += why != "keep"
            # The budget's share is taken: what comes next waits for the look, since a
            # block found used meanwhile leaves its bytes to the next in line.
            if taken >= RECHECK_CHUNK or (why == "budget" and quota <= 0):
                return chunk, pending[i + 1 :]
        return chunk, []

    def _read(self, near: Sequence[Near]) -> dict[str, Node | None]:
        """Each near block's parent (one HEAD each, concurrently)."""

        def read(n: Near) -> tuple[str, Node | None]:
            entry, key = n.entry, n.entry.info.key
            try:
                found = with_retries(lambda: self.store.describe(key), self.settings)
            except S3KVError as exc:
                # Unread, it is kept: a block whose chain is unknown must not go.
                self.failures[key] = f"not deleted: its chain could not be read ({exc})"
                return key, None
            if found is None:
                return key, None
            listed = entry.info.last_modified or self.now
            modified = max(listed, found.info.last_modified or listed)
            assert entry.parsed is not None
            parent = parent_key(entry.parsed, found.metadata)
            return key, Node(key, modified.timestamp(), parent)

        self.head_requests += len(near)
        with ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="s3kv-gc") as pool:
            return dict(pool.map(read, near))

    def _look_again(self, entries: Sequence[Entry]) -> dict[str, ObjectInfo | None]:
        """Right before their deletes: what is there now (a dry run deletes nothing)."""
        if self.dry_run or not entries:
            return {}

        def look(entry: Entry) -> tuple[str, ObjectInfo | None]:
            key = entry.info.key
            return key, with_retries(lambda: self.store.head(key), self.settings)

        self.head_requests += len(entries)
        with ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="s3kv-gc") as pool:
            return dict(pool.map(look, entries))


def _moved(listed: ObjectInfo, now: ObjectInfo) -> bool:
    """Written or renewed since it was listed (a renewal keeps the ETag; the time moves)."""
    if now.etag is not None and listed.etag is not None and now.etag != listed.etag:
        return True
    if listed.last_modified is None or now.last_modified is None:
        return False
    return int(now.last_modified.timestamp()) > int(listed.last_modified.timestamp())


def _keep_ancestors(key: str, parents: dict[str, str | None], keep: set[str]) -> None:
    parent = parents.get(key)
    while parent is not None and parent not in keep:
        keep.add(parent)
        parent = parents.get(parent)
