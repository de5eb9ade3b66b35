"""A namespace's manifest as a store holds it: its key, its bytes read capped, and
whether it is sound for the folder it sits in.

:mod:`s3kv.naming.manifest` turns a manifest's bytes into a namespace and back; this
module reads them from a store. Every manifest read goes through :func:`read_capped`, so
an oversized object never reaches memory; :func:`check_manifest` holds a manifest to its
folder (its fields must hash to the folder's digest, or vLLM would never read its blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

from s3kv.errors import ManifestError, ObjectNotFoundError
from s3kv.naming.keys import join_prefix, manifest_path
from s3kv.naming.manifest import MAX_MANIFEST_BYTES, Provenance, read_provenance
from s3kv.naming.namespace import Namespace
from s3kv.retry import with_retries
from s3kv.settings import S3Settings
from s3kv.stores import Store


def manifest_key(prefix: str, folder: str) -> str:
    return join_prefix(prefix, manifest_path(folder))


@dataclass(frozen=True, slots=True)
class Manifest:
    """A namespace's ``config.json`` as stored, and what it says."""

    key: str
    data: bytes
    namespace: Namespace | None
    problem: str = ""
    """Why the manifest cannot be trusted (unparseable, or fields that do not hash to
    the folder's digest); empty when it is sound."""
    provenance: Provenance | None = None
    """When and by which s3kv (and vLLM) it was created; None if not recorded."""


def read_capped(store: Store, key: str, settings: S3Settings) -> bytes:
    """A manifest's bytes, at most one more than :data:`MAX_MANIFEST_BYTES`.

    Every manifest read goes through here: one byte past the cap is enough for the parser
    to refuse an oversized object, and a 100 MB one never reaches memory.
    """
    return with_retries(lambda: store.get_range(key, start=0, end=MAX_MANIFEST_BYTES + 1), settings)


def read_manifest(
    store: Store, prefix: str, folder: str, settings: S3Settings, *, key: str | None = None
) -> Manifest | None:
    """The manifest of ``folder`` under ``prefix``, checked against the folder; None if
    absent. ``key`` defaults to ``prefix/folder/config.json``."""
    key = key or manifest_key(prefix, folder)
    try:
        data = read_capped(store, key, settings)
    except ObjectNotFoundError:
        return None
    return Manifest(key, data, *check_manifest(data, folder), read_provenance(data))


def check_manifest(data: bytes, folder: str) -> tuple[Namespace | None, str]:
    """Parse a manifest and check its fields hash to the folder it sits in."""
    try:
        namespace = Namespace.from_manifest(data)
    except ManifestError as exc:
        return None, f"unreadable manifest: {exc}"
    if namespace.folder != folder:
        return namespace, (
            f"its fields hash to folder {namespace.folder!r}, not {folder!r} (edited, or "
            "copied into the wrong folder); vLLM would never read blocks for it here"
        )
    return namespace, ""
