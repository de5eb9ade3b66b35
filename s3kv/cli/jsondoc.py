"""What ``--json`` prints: one document per command, as its schema in ``schemas/`` says.

The same thing has the same name and type in every command (``manifest`` is a status
string, ``blocks`` a count, ``nested`` the caches below a location, ``seconds`` the run
time; ``null`` where a value is not known or not given); times are RFC 3339 in UTC to
the second (``2026-12-01T03:32:39Z``, which jq's ``fromdateiso8601`` reads); in a dry
run what would happen is named so (``would_copy``, never ``copied``); the words are the
text output's (``left_out``, ``already_present``). Every document has ``command`` and
``ok``; an error is ``{"command", "ok": false, "error": {"code", "kind", "message",
"suggestions"}}``, printed on stdout all the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timezone
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3kv.ops.gc.collect import GCReport
    from s3kv.ops.inventory import Inventory
    from s3kv.ops.remove import RemoveReport
    from s3kv.ops.repair import RepairReport
    from s3kv.ops.scope import NestedCache
    from s3kv.ops.sync import NamespaceSync, SyncReport
    from s3kv.ops.verify import VerifyReport

SCHEMAS = ("cp", "demo", "error", "gc", "key", "ls", "pull", "push", "repair", "rm", "verify")


def schema(command: str) -> dict[str, Any]:
    """The JSON Schema of a command's ``--json`` document (``"error"`` for errors)."""
    name = "sync" if command in ("push", "pull", "cp") else command
    text = resources.files("s3kv.cli").joinpath(f"schemas/{name}.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def emit(document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=2, sort_keys=True))


def timestamp(when: datetime | None) -> str | None:
    """RFC 3339 in UTC, to the second: ``2026-12-01T03:32:39Z``."""
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def nested(caches: Iterable[NestedCache]) -> list[dict[str, Any]]:
    return [{"location": c.location, "namespace_count": c.namespaces} for c in caches]


def error(
    command: str, code: int, kind: str, message: str, suggestions: Iterable[str] = ()
) -> dict[str, Any]:
    return {
        "command": command,
        "ok": False,
        "error": {
            "code": code,
            "kind": kind,
            "message": message,
            "suggestions": list(suggestions),
        },
    }


def _would(dry_run: bool, done: str, would: str, value: int) -> dict[str, int]:
    return {would if dry_run else done: value}


def _sync_counts(dry_run: bool, copied: int, replaced: int, nbytes: int) -> dict[str, int]:
    return {
        **_would(dry_run, "copied", "would_copy", copied),
        **_would(dry_run, "replaced", "would_replace", replaced),
        **_would(dry_run, "bytes_copied", "would_copy_bytes", nbytes),
    }


def _namespace(ns: NamespaceSync, dry_run: bool) -> dict[str, Any]:
    return {
        "folder": ns.folder,
        "manifest": ns.manifest,
        "problem": ns.problem or None,
        **_sync_counts(dry_run, ns.copied, ns.replaced, ns.bytes),
        "already_present": ns.already_present,
        "failed": ns.failed,
        "left_out": ns.skipped,
        "unverified": ns.unverified,
    }


def sync(command: str, r: SyncReport) -> dict[str, Any]:
    return {
        "command": command,
        "ok": r.ok,
        "dry_run": r.dry_run,
        "source": r.source,
        "destination": r.destination,
        "server_side": r.server_side,
        **_sync_counts(r.dry_run, r.copied, r.replaced, r.bytes),
        "already_present": r.already_present,
        "failed": r.failed,
        "left_out": r.skipped,
        "unverified": r.unverified,
        "stray_keys": r.stray_keys,
        "stray_examples": list(r.stray_examples),
        "nested": nested(r.nested),
        "failures": dict(r.failures),
        "destination_listings": r.destination_listings,
        "seconds": r.seconds,
        "namespaces": [_namespace(ns, r.dry_run) for ns in r.namespaces],
    }


def ls(inv: Inventory) -> dict[str, Any]:
    return {
        "command": "ls",
        "ok": True,
        "location": inv.location,
        "blocks": inv.blocks,
        "bytes": inv.bytes,
        "stray_keys": inv.stray_keys,
        "stray_examples": list(inv.stray_examples),
        "nested": nested(inv.nested),
        "not_files": list(inv.not_files),
        "tenants": [
            {"tenant": t.tenant, "location": t.location, "namespace_count": t.namespaces,
             "blocks": t.blocks, "bytes": t.bytes}
            for t in inv.tenants
        ],
        "seconds": inv.seconds,
        "namespaces": [
            {
                "folder": ns.folder,
                "model": ns.model,
                "dtype": ns.dtype,
                "tp_size": ns.tp_size,
                "pp_size": ns.pp_size,
                "pcp_size": ns.pcp_size,
                "dcp_size": ns.dcp_size,
                "ranks": list(ns.ranks),
                "blocks": ns.blocks,
                "bytes": ns.bytes,
                "oldest": timestamp(ns.oldest),
                "newest": timestamp(ns.newest),
                "manifest": ns.manifest,
                "problem": ns.manifest_problem or None,
                "bytes_by_last_use": dict(ns.bytes_by_last_use),
                "blocks_by_last_use": dict(ns.blocks_by_last_use),
                "block_bytes": ns.block_bytes,
                "created": timestamp(ns.created),
                "s3kv_version": ns.s3kv_version,
                "vllm_version": ns.vllm_version,
            }
            for ns in inv.namespaces
        ],
    }


def verify(r: VerifyReport) -> dict[str, Any]:
    return {
        "command": "verify",
        "ok": r.ok,
        "location": r.location,
        "deep": r.deep,
        "blocks": r.blocks,
        "blocks_read": r.blocks_read,
        "bytes_read": r.bytes_read,
        "unverified": r.unverified,
        "tags_checked": r.tags_checked,
        "counts": dict(r.counts),
        "findings": [{"kind": f.kind, "key": f.key, "message": f.message} for f in r.findings],
        "stray_keys": r.stray_keys,
        "nested": nested(r.nested),
        "seconds": r.seconds,
        "namespaces": [
            {"folder": n.folder, "blocks": n.blocks, "manifest": n.manifest} for n in r.folders
        ],
    }


def gc(r: GCReport) -> dict[str, Any]:
    dry = r.dry_run
    return {
        "command": "gc",
        "ok": r.ok,
        "dry_run": dry,
        "location": r.location,
        **_would(dry, "blocks_deleted", "would_delete_blocks", r.blocks_deleted),
        **_would(dry, "bytes_freed", "would_free_bytes", r.bytes_freed),
        **_would(dry, "manifests_deleted", "would_delete_manifests", r.manifests_deleted),
        **_would(dry, "temp_files_deleted", "would_delete_temp_files", r.temp_files_deleted),
        **_would(dry, "uploads_aborted", "would_abort_uploads", r.uploads_aborted),
        "blocks_kept": r.blocks_kept,
        "bytes_kept": r.bytes_kept,
        "already_gone": r.already_gone,
        "manifests_restored": r.manifests_restored,
        "head_requests": r.head_requests,
        "used_since_listed": r.used_since_listed,
        "versioning": r.versioning,
        "noncurrent_versions": r.noncurrent_versions,
        "noncurrent_bytes": r.noncurrent_bytes,
        **_would(
            dry,
            "noncurrent_versions_deleted",
            "would_delete_noncurrent_versions",
            r.noncurrent_versions_deleted,
        ),
        "delete_requests": r.delete_requests,
        "failures": dict(r.failures),
        "stray_keys": r.stray_keys,
        "nested": nested(r.nested),
        "seconds": r.seconds,
    }


def repair(r: RepairReport) -> dict[str, Any]:
    dry = r.dry_run
    return {
        "command": "repair",
        "ok": r.ok,
        "dry_run": dry,
        "location": r.location,
        "source": r.source,
        "checked": r.checked,
        "damaged": r.damaged,
        **_would(dry, "replaced", "would_replace", r.replaced),
        **_would(dry, "removed", "would_remove", r.removed),
        "unrepairable": r.unrepairable,
        "changed": r.changed,
        "failed": r.failed,
        "unverified": r.unverified,
        "bytes_read": r.bytes_read,
        **({} if r.tagged is None else _would(dry, "tagged", "would_tag", r.tagged)),
        "actions": [{"key": b.key, "problem": b.problem, "action": b.action} for b in r.blocks],
        "failures": dict(r.failures),
        "stray_keys": r.stray_keys,
        "nested": nested(r.nested),
        "seconds": r.seconds,
    }


def rm(r: RemoveReport) -> dict[str, Any]:
    dry = r.dry_run
    return {
        "command": "rm",
        "ok": r.ok,
        "dry_run": dry,
        "location": r.location,
        **_would(dry, "blocks_deleted", "would_delete_blocks", r.blocks_deleted),
        **_would(dry, "bytes_freed", "would_free_bytes", r.bytes_freed),
        **_would(dry, "manifests_deleted", "would_delete_manifests", r.manifests_deleted),
        **_would(dry, "temp_files_deleted", "would_delete_temp_files", r.temp_files_deleted),
        "already_gone": r.already_gone,
        "manifests_restored": r.manifests_restored,
        "blocks_left": r.blocks_left,
        "delete_requests": r.delete_requests,
        "failures": dict(r.failures),
        "stray_keys": r.stray_keys,
        "seconds": r.seconds,
        "namespaces": [
            {
                "folder": ns.folder,
                "model": ns.model,
                "ranks": list(ns.ranks),
                "blocks": ns.blocks,
                "bytes": ns.bytes,
                "manifest": ns.manifest,
                "blocks_left": ns.blocks_left,
                "manifest_left": ns.manifest_left,
                "stray_keys": ns.stray_keys,
            }
            for ns in r.namespaces
        ],
    }
