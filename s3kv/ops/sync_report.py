"""What a sync is asked (:class:`SyncOptions`) and what it answers (:class:`SyncReport`,
one :class:`NamespaceSync` per namespace): the types of ``push``, ``pull`` and ``cp``
(:mod:`s3kv.ops.sync` runs them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from s3kv.ops.scope import NestedCache
from s3kv.progress import Progress

MAX_FAILURES_KEPT = 1000
"""Failed blocks named in a report (all are counted)."""

ManifestStatus = Literal[
    "copied", "present", "would-copy", "missing", "invalid", "conflict", "failed"
]
_BAD_MANIFEST = ("invalid", "conflict", "failed")


@dataclass(frozen=True, slots=True)
class SyncOptions:
    """What to copy and how."""

    namespaces: tuple[str, ...] = ()
    """Only these namespaces (folder names or 12-hex digests); empty: all."""
    ranks: tuple[int, ...] = ()
    """Only blocks of these ranks; empty: all. Manifests are rank-less and always copied."""
    allow_missing_manifest: bool = False
    """Copy blocks of namespaces without a manifest (vLLM's object-store tier writes none)."""
    dry_run: bool = False
    concurrency: int | None = None
    """Blocks in flight at once; default: the destination settings' concurrency."""
    checksum: bool = False
    """Compare existing destination blocks by checksum too (reading them), not only by
    size, and replace those that fail their check from the source."""
    allow_empty: bool = False
    """A source with nothing at all under it is no error (see :mod:`s3kv.ops.scope`)."""


@dataclass(frozen=True, slots=True)
class NamespaceSync:
    """What happened to one namespace."""

    folder: str
    manifest: ManifestStatus
    copied: int = 0
    already_present: int = 0
    failed: int = 0
    skipped: int = 0
    """Blocks not copied because the namespace's manifest is missing, invalid or in conflict."""
    bytes: int = 0
    problem: str = ""
    unverified: int = 0
    """Copied blocks read from S3 without a recorded checksum (size-checked only)."""
    replaced: int = 0
    """Destination blocks that failed their check, replaced from the source (would be,
    in a dry run)."""


SyncProgress = Progress
"""The events ``on_progress`` receives (:class:`s3kv.progress.Progress`)."""


@dataclass(frozen=True, slots=True)
class SyncReport:
    """The outcome of one sync. ``copied`` means "would copy" in a dry run."""

    source: str
    destination: str
    namespaces: tuple[NamespaceSync, ...]
    copied: int
    already_present: int
    failed: int
    skipped: int
    bytes: int
    seconds: float
    stray_keys: int
    stray_examples: tuple[str, ...] = ()
    failures: Mapping[str, str] = field(default_factory=dict)
    """Destination key -> why (the first :data:`MAX_FAILURES_KEPT`)."""
    server_side: bool = False
    dry_run: bool = False
    destination_listings: int = 0
    unverified: int = 0
    """Of ``copied``: blocks read from S3 that carried no recorded checksum, so only their
    size was checked. They do not make ``ok`` false."""
    replaced: int = 0
    """Destination blocks that failed their check, replaced from the source."""
    nested: tuple[NestedCache, ...] = ()
    """Caches nested below the source: not part of it, left out (see :mod:`s3kv.ops.scope`)."""

    @property
    def ok(self) -> bool:
        """No block failed, no key was refused as stray, and no namespace was left out for
        want of a sound manifest."""
        return (
            self.failed == 0
            and self.skipped == 0
            and self.stray_keys == 0
            and all(n.manifest not in _BAD_MANIFEST for n in self.namespaces)
        )
