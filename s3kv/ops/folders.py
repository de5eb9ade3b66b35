"""The namespace folders directly under a location, found by name, and picked by name.

``s3kv rm`` must not list what it does not remove: a location may hold millions of other
blocks. :func:`namespace_folders` finds the folders with one listing request per
first-level name (:func:`s3kv.transfers.listing.child_names`), whatever lies below each; a name is
a namespace's when it parses as its folder (``<model>_<digest>``) or one of its rank
folders (``..._r<rank>``). :func:`pick` keeps those a ``--namespace`` (folder or digest)
or ``--model`` names, and says what was probably meant when one names none.
"""

from __future__ import annotations

from collections.abc import Sequence

from s3kv.errors import NotAnS3KVKeyError, NothingMatchedError
from s3kv.naming.location import Location
from s3kv.naming.namespace import DIGEST_LENGTH
from s3kv.naming.parse import parse_key
from s3kv.ops.scope import closest
from s3kv.stores import Store
from s3kv.transfers.listing import child_names, root_of


def namespace_folders(store: Store, loc: Location) -> dict[str, set[int]]:
    """Namespace folders directly under the location -> ranks with a folder of blocks."""
    found: dict[str, set[int]] = {}
    for name in child_names(store, root_of(loc.prefix)):
        for probe in (f"{name}/config.json", f"{name}/abc/de_g0/abcdef.bin"):
            try:
                parsed = parse_key(probe)
            except NotAnS3KVKeyError:
                continue
            ranks = found.setdefault(parsed.folder, set())
            if parsed.rank is not None:
                ranks.add(parsed.rank)
            break
    return found


def model_part(folder: str) -> str:
    """The model of a folder as vLLM spells it there (``/`` replaced by ``_``)."""
    return folder[: -(DIGEST_LENGTH + 1)]


def pick(
    loc: Location,
    folders: dict[str, set[int]],
    *,
    namespaces: Sequence[str] = (),
    models: Sequence[str] = (),
) -> dict[str, set[int]]:
    """The folders (with their ranks) the filters name: each ``namespaces`` value a folder
    or digest, each of ``models`` a model; :class:`NothingMatchedError` naming the
    closest names when the location holds none or a filter matches none."""
    if not folders:
        raise NothingMatchedError(
            f"no namespaces directly under {loc.url} - check the location with 's3kv ls'"
        )
    chosen: dict[str, set[int]] = {}
    misses: list[str] = []
    suggestions: list[str] = []
    digests = {f: f.rpartition("_")[2] for f in folders}
    for value in namespaces:
        hits = [f for f in folders if value in (f, digests[f])]
        candidates = sorted(folders) + sorted(digests.values())
        _note(f"--namespace {value}", hits, closest(value, candidates), misses, suggestions)
        chosen.update((f, folders[f]) for f in hits)
    for model in models:
        hits = [f for f in folders if model_part(f) == model.replace("/", "_")]
        candidates = sorted({model_part(f) for f in folders})
        _note(f"--model {model}", hits, closest(model.replace("/", "_"), candidates),
              misses, suggestions)  # fmt: skip
        chosen.update((f, folders[f]) for f in hits)
    if misses:
        raise NothingMatchedError(
            f"{'; '.join(misses)} (at {loc.url}); nothing removed", suggestions=tuple(suggestions)
        )
    return dict(sorted(chosen.items()))


def _note(
    flag: str, hits: Sequence[str], close: list[str], misses: list[str], suggestions: list[str]
) -> None:
    """A filter that matched nothing: the message and the closest names."""
    if hits:
        return
    suggestions += close
    hint = f" - did you mean {' or '.join(close)}?" if close else ""
    misses.append(f"{flag} matched no namespace{hint}")
