"""What a location holds, and what to say when it holds nothing that was asked for.

One meaning of a location for every command (``push``, ``pull``, ``cp``, ``ls``,
``verify``, ``gc``, ``repair``): ``s3://bucket/prefix`` or a directory holds the
namespaces whose folders sit directly under it (``<location>/<folder>/config.json``,
``<location>/<folder>_r<rank>/...``), which is where vLLM's ``FileMapper`` puts them for
``root_dir=<location>``. Caches nested deeper belong to their own location.

A :class:`Census` is fed every listed entry and answers, once the listing is done, the
question every command asks first: does this location hold what was asked for? If not,
:meth:`Census.check` raises :class:`s3kv.NothingMatchedError` naming the location the
user probably meant: one level down (caches nested under it), one level up (a namespace
or rank folder was given), a sibling with a close name, or the closest namespace
folders, digests and ranks (``difflib``).
"""

from __future__ import annotations

import difflib
import itertools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from s3kv.errors import InvalidLocationError, NothingMatchedError, plural
from s3kv.naming.location import Location, parse_location
from s3kv.naming.parse import ParsedKey, parse_folder, parse_key

if TYPE_CHECKING:  # the stores import boto3 and awscrt: `s3kv key` needs neither
    from s3kv.stores import Store
    from s3kv.transfers.listing import Entry

MAX_SIBLINGS = 200
"""Sibling names (one listing request each on S3) looked at to suggest a location."""
ALLOW_EMPTY_HINT = "pass --allow-empty where an empty location is expected"


@dataclass(frozen=True, slots=True)
class NestedCache:
    """A cache found below a location, not part of it: where it is and its size."""

    location: str
    namespaces: int


class Census:
    """Counts what a listing of ``location`` holds, against the filters asked for."""

    def __init__(
        self, location: Location, *, namespaces: Sequence[str] = (), ranks: Sequence[int] = ()
    ) -> None:
        self.location = location
        self.wanted_namespaces = tuple(namespaces)
        self.wanted_ranks = tuple(ranks)
        self.folders: dict[str, set[int]] = {}
        """Namespace folders directly under the location -> ranks that hold blocks."""
        self.nested: dict[str, set[str]] = {}
        """Prefix of a cache nested deeper -> its namespace folders."""
        self.stray = 0
        self.blocks = 0
        """Blocks that pass the filters."""
        self.bytes = 0

    # -- counting -----------------------------------------------------------------------

    def add(self, entry: Entry) -> bool:
        """Count one listed entry; True when it is a block or manifest the filters keep."""
        if entry.nested is not None:
            self.nested.setdefault(entry.nested.prefix, set()).add(entry.nested.folder)
            return False
        parsed = entry.parsed
        if parsed is None:
            if not entry.temp:
                self.stray += 1
            return False
        ranks = self.folders.setdefault(parsed.folder, set())
        if parsed.kind == "block":
            assert parsed.rank is not None
            ranks.add(parsed.rank)
        if not self.wants(parsed):
            return False
        if parsed.kind == "block":
            self.blocks += 1
            self.bytes += entry.info.size
        return True

    def wants_namespace(self, folder: str, digest: str) -> bool:
        wanted = self.wanted_namespaces
        return not wanted or folder in wanted or digest in wanted

    def wants(self, parsed: ParsedKey) -> bool:
        """Whether the filters keep this key (manifests have no rank: kept with their
        namespace)."""
        if not self.wants_namespace(parsed.folder, parsed.digest):
            return False
        return parsed.kind != "block" or not self.wanted_ranks or parsed.rank in self.wanted_ranks

    def wants_path(self, key: str) -> bool:
        """Whether the filters keep anything under ``key`` (a path below the location,
        parsed by its top folder): every path when nothing was filtered."""
        if not self.wanted_namespaces and not self.wanted_ranks:
            return True
        found = parse_folder(key.split("/", 1)[0])
        if found is None:
            return False
        folder, digest, rank = found
        if not self.wants_namespace(folder, digest):
            return False
        return rank is None or not self.wanted_ranks or rank in self.wanted_ranks

    def not_files(self, store: Store) -> dict[str, str]:
        """What ``store``'s listings passed over inside what was asked (a directory's
        symlinks, FIFOs, sockets, devices: :meth:`Store.passed_over`), key -> why."""
        return {key: unread(self.location.url_for(key), what)
                for key, what in sorted(store.passed_over().items())
                if self.wants_path(key.removeprefix(self.location.prefix))}

    def nested_caches(self) -> tuple[NestedCache, ...]:
        return tuple(
            NestedCache(self.location.url_for(prefix), len(folders))
            for prefix, folders in sorted(self.nested.items())
        )

    # -- the verdict --------------------------------------------------------------------

    def check(self, store: Store, *, allow_empty: bool = False) -> None:
        """Raise :class:`NothingMatchedError` unless the location holds what was asked.

        ``allow_empty`` accepts a location with nothing at all under it (no namespace,
        no nested cache, no stray key), and only that: a namespace or rank filter that
        matches nothing at a location that holds namespaces is always an error.
        """
        if not self.folders:
            self._nothing_here(store, allow_empty)
            return
        self._check_namespaces()
        self._check_ranks()

    def _nothing_here(self, store: Store, allow_empty: bool) -> None:
        where = self.location.url
        # First: the keys of a namespace folder given as the location parse as nested
        # under its parent (or not at all), which is where the user should point.
        folder = own_folder(self.location)
        if folder is not None and (self.nested or self.stray):
            parent, namespace, rank = folder
            what = "namespace folder" if rank is None else f"rank {rank} folder of a namespace"
            keep = f"--namespace {namespace}" + ("" if rank is None else f" --rank {rank}")
            raise NothingMatchedError(
                f"{where} is a {what}, one level below its cache: the cache is at {parent} - "
                f"did you mean that? (with {keep} to keep to this one)",
                suggestions=(parent,),
            )
        if self.nested:
            caches = self.nested_caches()
            found = ", ".join(
                f"{plural(c.namespaces, 'namespace')} under {c.location}" for c in caches[:3]
            )
            more = f" and {len(caches) - 3} more" if len(caches) > 3 else ""
            ask = "did you mean that?" if len(caches) == 1 else "give one of those locations"
            raise NothingMatchedError(
                f"no namespaces directly under {where}; found {found}{more} - {ask}",
                suggestions=tuple(c.location for c in caches),
            )
        if self.stray:
            return  # keys outside the layout: the command names them itself
        missing = self.location.path is not None and not self.location.path.is_dir()
        if allow_empty and not missing:
            return  # an existing location with nothing in it (a bucket's missing is exit 3)
        close = _close_locations(store, self.location)
        s3_url = _meant_as_s3(self.location) if missing else None
        meant = close[:1] + ([s3_url] if s3_url else [])
        if meant:
            hint = f"did you mean {' or '.join(meant)}?"
        elif missing:
            hint = "give an existing directory, or s3://bucket/prefix"
        else:
            hint = ALLOW_EMPTY_HINT
        if missing and allow_empty:
            hint = f"--allow-empty accepts an existing empty location only; {hint}"
        what = "no such directory" if missing else "nothing under it"
        raise NothingMatchedError(
            f"no namespaces at {where} ({what}) - {hint}", suggestions=tuple(meant)
        )

    def _check_namespaces(self) -> None:
        candidates = sorted(self.folders) + sorted({_digest(f) for f in self.folders})
        misses = []
        suggestions: list[str] = []
        for value in self.wanted_namespaces:
            if any(value in (f, _digest(f)) for f in self.folders):
                continue
            close = closest(value, candidates)
            suggestions += close
            misses.append(
                f"--namespace {value} matched no namespace at {self.location.url}"
                + (f"; did you mean {' or '.join(close)}?" if close else _holding(self.folders))
            )
        if misses:
            raise NothingMatchedError("; ".join(misses), suggestions=tuple(suggestions))

    def _check_ranks(self) -> None:
        present: set[int] = set()
        for folder, ranks in self.folders.items():
            if self.wants_namespace(folder, _digest(folder)):
                present |= ranks
        missing = [r for r in self.wanted_ranks if r not in present]
        if missing:
            flags = " ".join(f"--rank {r}" for r in missing)
            there = ", ".join(str(r) for r in sorted(present)) or "none"
            raise NothingMatchedError(
                f"{flags} matched no block at {self.location.url}"
                + (" in the namespaces chosen" if self.wanted_namespaces else "")
                + f"; ranks present: {there}",
                suggestions=tuple(str(r) for r in sorted(present)),
            )


def unread(where: str, what: str) -> str:
    """Why an entry of a directory was neither copied nor checked (see
    :meth:`s3kv.stores.local.LocalStore.passed_over`)."""
    return (
        f"{where} is {what}: not read and not followed (s3kv reads only the regular files "
        "and folders inside a cache directory: nothing outside it is sent or checked); put "
        "the file or folder itself in its place"
    )


def closest(value: str, candidates: Iterable[str], *, n: int = 3) -> list[str]:
    """The candidates ``value`` most likely meant: those it starts (a truncated digest or
    folder), then the closest by ``difflib``."""
    pool = list(dict.fromkeys(candidates))
    starts = [c for c in pool if c.startswith(value) and value]
    close = difflib.get_close_matches(value, pool, n=n, cutoff=0.6)
    return list(dict.fromkeys(starts + close))[:n]


def _holding(folders: Iterable[str]) -> str:
    names = sorted(folders)
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"; it holds {plural(len(names), 'namespace')}: {shown}"


def _digest(folder: str) -> str:
    return folder.rpartition("_")[2]


def own_folder(location: Location) -> tuple[str, str, int | None] | None:
    """(the parent location, namespace folder, rank) when the location itself is a
    namespace folder (``.../<model>_<digest>``) or a rank folder (``..._r<rank>``)."""
    if location.path is not None:
        name, parent = location.path.name, str(location.path.parent)
    else:
        head, _, name = location.prefix.rpartition("/")
        parent = f"s3://{location.bucket}/{head}" if head else f"s3://{location.bucket}"
    for probe in (f"{name}/config.json", f"{name}/abc/de_g0/abcdef.bin"):
        try:
            parsed = parse_key(probe)
        except ValueError:
            continue
        return parent, parsed.folder, parsed.rank
    return None


def _meant_as_s3(location: Location) -> str | None:
    """``s3://kv-prod/prod`` for a directory given as ``kv-prod/prod`` (no scheme), when
    that text reads as a bucket and prefix; None for paths written as paths (``/``,
    ``./``, ``~``)."""
    text = location.given
    if not text or text.startswith(("/", ".", "~")):
        return None
    try:
        return parse_location("s3://" + text).url
    except InvalidLocationError:
        return None


def _close_locations(store: Store, location: Location) -> list[str]:
    """Siblings of the location whose names are close to its last segment."""
    if location.path is not None:
        name, parent = location.path.name, location.path.parent
        try:
            names = [e.name for e in os.scandir(parent) if e.is_dir()][:MAX_SIBLINGS]
        except OSError:
            return []
        return [str(Path(parent, n)) for n in closest(name, names, n=3) if n != name]
    head, _, name = location.prefix.rpartition("/")
    if not name:
        return []  # a whole bucket: no sibling to offer
    from s3kv.transfers.listing import child_names, root_of

    root = root_of(head)
    names = list(itertools.islice(child_names(store, root), MAX_SIBLINGS))
    return [f"s3://{location.bucket}/{root}{n}" for n in closest(name, names, n=3) if n != name]
