"""A namespace's manifest, copied before any of its blocks (``push``, ``pull``, ``cp``).

A source without a manifest, or with one that does not parse, leaves the namespace's
blocks out (unless blocks without a manifest are allowed); a destination that holds a
different manifest is a conflict. The first manifest written proves that the destination
refuses a second create-only write (:mod:`s3kv.transfers.writes`), before any block is written.
"""

from __future__ import annotations

from s3kv.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    StoreError,
    TransientStoreError,
    UnsupportedByStoreError,
)
from s3kv.naming.location import Location
from s3kv.ops.sync_report import ManifestStatus, SyncOptions
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import PutOptions, Store
from s3kv.transfers.stored_manifest import check_manifest, manifest_key, read_capped, read_manifest
from s3kv.transfers.writes import prove_create_only, put_create_only


class ManifestCopy:
    """The manifests of one sync, from ``src`` to ``dst``."""

    def __init__(
        self,
        src: Store,
        src_loc: Location,
        src_settings: S3Settings,
        dst: Store,
        dst_loc: Location,
        settings: S3Settings,
        options: SyncOptions,
    ) -> None:
        self.src, self.src_loc, self.src_settings = src, src_loc, src_settings
        self.dst, self.dst_loc, self.settings, self.options = dst, dst_loc, settings, options
        self.proven = False  # the destination honours If-None-Match (see s3kv.transfers.writes)

    def copy(self, folder: str) -> tuple[ManifestStatus, str]:
        """Copy ``folder``'s manifest (before any of its blocks): its status, and why."""
        manifest = read_manifest(self.src, self.src_loc.prefix, folder, self.src_settings)
        status: ManifestStatus
        problem = ""
        if manifest is None:
            status, problem = (
                "missing",
                (
                    f"no {folder}/config.json at the source"
                    + (
                        ""
                        if self.options.allow_missing_manifest
                        else "; blocks left out (pass --allow-missing-manifest to copy them)"
                    )
                ),
            )
        elif manifest.problem:
            status, problem = "invalid", f"{manifest.key}: {manifest.problem}"
        else:
            try:
                status, problem = self._put(folder, manifest.data)
            except (
                AccessDeniedError,
                BucketNotFoundError,
                TransientStoreError,
                UnsupportedByStoreError,
            ):
                raise  # the whole destination is unusable: no other namespace would fare better
            except StoreError as exc:
                status, problem = "failed", str(exc)
        return status, problem

    def _put(self, folder: str, data: bytes) -> tuple[ManifestStatus, str]:
        key = manifest_key(self.dst_loc.prefix, folder)
        if self.options.dry_run:
            exists = with_retries(lambda: self.dst.head(key), self.settings) is not None
            return ("present" if exists else "would-copy"), ""
        created = put_create_only(self.dst, key, data, PutOptions(create_only=True), self.settings)
        if created:
            self._prove(key, data)
            return "copied", ""
        existing = read_capped(self.dst, key, self.settings)
        if existing == data:
            self._prove(key, existing)
            return "present", ""
        theirs, problem = check_manifest(existing, folder)
        ours, _ = check_manifest(data, folder)
        if problem or theirs is None or ours is None or theirs.fields != ours.fields:
            return "conflict", (
                f"{self.dst_loc.url_for(key)} exists and differs from the source's "
                f"manifest ({problem or 'other fields'}); blocks left out"
            )
        self._prove(key, existing)
        return "present", ""

    def _prove(self, key: str, stored: bytes) -> None:
        """The first manifest write of the run proves the destination refuses a second
        create-only PUT (see :mod:`s3kv.transfers.writes`), before any block is written."""
        if not self.proven:
            prove_create_only(self.dst, key, stored, self.settings)
            self.proven = True
