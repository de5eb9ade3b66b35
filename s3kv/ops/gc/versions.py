"""Versioned buckets: what a gc leaves stored, and removing it when asked.

In a versioned bucket a delete only adds a delete marker: the block's bytes stay, as a
noncurrent version, billed until the bucket's noncurrent-version rule removes them (the
Terraform module's ``noncurrent_version_expiration_days``, 1 day by default). Renewal
leaves one too: each copy of a block onto itself makes the previous version noncurrent.
So after its deletes gc lists the versions under the location and reports what is still
stored (``noncurrent_versions``, ``noncurrent_bytes``); with
``delete_noncurrent_versions`` it removes them: the noncurrent versions of the
location's blocks, then the delete markers left with nothing under them (a marker that
still hides a version is kept: removing it would bring the block back). Current
versions are never touched. Needs ``s3:GetBucketVersioning`` (else versioning is
reported unknown), ``s3:ListBucketVersions`` and, to remove, ``s3:DeleteObjectVersion``
(the writer policy grants all three under the prefix).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from s3kv.errors import AccessDeniedError, NotAnS3KVKeyError, S3KVError
from s3kv.naming.location import Location
from s3kv.naming.parse import parse_key
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import Store
from s3kv.stores.base import DELETE_BATCH, ObjectVersion
from s3kv.transfers.listing import list_root

UNKNOWN = "unknown"
"""Versioning status when the bucket would not say (no s3:GetBucketVersioning)."""


@dataclass
class Versions:
    """What a versioned bucket still stores of the location's blocks, after a gc."""

    versioning: str | None = None
    """``Enabled``, ``Suspended``, ``unknown`` (not allowed to ask), or None."""
    noncurrent: int = 0
    noncurrent_bytes: int = 0
    deleted: int = 0
    """Noncurrent versions removed (would be, in a dry run)."""
    deleted_bytes: int = 0
    markers_deleted: int = 0
    requests: int = 0
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def versioned(self) -> bool:
        return self.versioning in ("Enabled", "Suspended")


def status(store: Store, settings: S3Settings) -> str | None:
    """The bucket's versioning, or :data:`UNKNOWN` when the credentials may not ask."""
    try:
        return with_retries(store.versioning, settings)
    except AccessDeniedError:
        return UNKNOWN


def collect(
    store: Store,
    settings: S3Settings,
    location: Location,
    versioning: str | None,
    *,
    delete: bool,
    dry_run: bool,
) -> Versions:
    """Count (and with ``delete`` remove) noncurrent versions of the location's blocks."""
    report = Versions(versioning)
    if not report.versioned:
        return report
    doomed: list[tuple[str, str, int]] = []
    markers: dict[str, str] = {}  # key -> latest delete marker's version
    failed_keys: set[str] = set()
    try:
        for version in _blocks(store, location):
            if version.delete_marker:
                if version.latest:
                    markers[version.key] = version.version_id
                continue
            if version.latest:
                markers.pop(version.key, None)  # a current version: its marker is not latest
                continue
            report.noncurrent += 1
            report.noncurrent_bytes += version.size
            if delete:
                doomed.append((version.key, version.version_id, version.size))
                if len(doomed) >= DELETE_BATCH:
                    report.deleted += _remove(store, settings, doomed, report, failed_keys, dry_run)
                    doomed = []
        if delete:
            report.deleted += _remove(store, settings, doomed, report, failed_keys, dry_run)
            alone = [(k, v, 0) for k, v in markers.items() if k not in failed_keys]
            report.markers_deleted = _remove(store, settings, alone, report, failed_keys, dry_run)
    except S3KVError as exc:
        report.failures[f"{location.url} (versions)"] = str(exc)
    return report


def _blocks(store: Store, location: Location) -> Iterator[ObjectVersion]:
    """Versions of this location's blocks (not of caches nested below it)."""
    root = list_root(location)
    for version in store.list_versions(root):
        try:
            parsed = parse_key(version.key)
        except NotAnS3KVKeyError:
            continue
        if parsed.kind == "block" and parsed.prefix == location.prefix.strip("/"):
            yield version


def _remove(
    store: Store,
    settings: S3Settings,
    items: list[tuple[str, str, int]],
    report: Versions,
    failed_keys: set[str],
    dry_run: bool,
) -> int:
    """Delete ``(key, version, size)`` for good; returns how many went."""
    if not items:
        return 0
    if dry_run:
        report.deleted_bytes += sum(size for _, _, size in items)
        return len(items)
    report.requests += 1
    pairs = [(k, v) for k, v, _ in items]
    failed = with_retries(lambda: store.delete_versions(pairs), settings)
    report.failures.update(failed)
    gone = 0
    for key, version, size in items:
        if f"{key} {version}" in failed:
            failed_keys.add(key)
        else:
            gone += 1
            report.deleted_bytes += size
    return gone
