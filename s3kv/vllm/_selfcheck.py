"""The tier's namespace from vLLM's own ``FileMapper``, and the start-up self-check.

s3kv re-implements ``FileMapper``'s hashing so that the library and CLI work without
vLLM. Inside vLLM the real one is at hand: the tier builds it for the spec (as the
``fs`` tier does) and takes its run config as the namespace (:func:`namespace_of`), so a
field a newer vLLM hashes is carried along (``Namespace.extra_fields``, as manifests
carry it) and the keys still agree. The self-check then compares folder, rank, manifest
key and a block key: a vLLM that spells keys otherwise stops the tier instead of
missing every block, silently.
"""

from __future__ import annotations

from typing import Any

from s3kv.errors import InvalidNamespaceError, ManifestError
from s3kv.naming.keys import KeyMapper
from s3kv.naming.namespace import Namespace

# A fixed block (32-byte hash, group 1) whose key both sides must spell alike.
_PROBE_KEY = bytes(range(32)) + (1).to_bytes(4, "big")


def namespace_differences(namespace: Namespace, file_mapper: Any) -> list[str]:
    """Descriptions of what differs between ``namespace`` and a vLLM ``FileMapper``.

    ``file_mapper`` must be built with ``root_dir=""``; an empty list means both name
    the same folder, hash the same fields and spell block and manifest keys alike.
    """
    theirs: dict[str, Any] = dict(file_mapper.get_run_config())
    ours = namespace.fields
    problems = []
    for name in sorted(set(theirs) | set(ours)):
        if name not in ours:
            problems.append(f"{name}: vLLM hashes {theirs[name]!r}, s3kv does not know it")
        elif name not in theirs:
            problems.append(f"{name}: s3kv hashes {ours[name]!r}, vLLM does not")
        elif theirs[name] != ours[name]:
            problems.append(f"{name}: vLLM hashes {theirs[name]!r}, s3kv {ours[name]!r}")
    # With root_dir "" FileMapper spells "/<folder>..."; s3kv's keys under no prefix are
    # the same without the leading "/" (what vLLM's object-store tier stores, too).
    keys = KeyMapper(namespace, prefix="")
    folder = str(file_mapper.base_path).rsplit("/", 1)[-1]
    if folder != namespace.folder:
        problems.append(f"folder: vLLM {folder!r}, s3kv {namespace.folder!r}")
    if file_mapper.rank != namespace.rank:
        problems.append(f"rank: vLLM {file_mapper.rank}, s3kv {namespace.rank}")
    if not problems:
        pairs = [
            ("manifest key", file_mapper.get_config_file_path(), "/" + keys.config_key()),
            ("block key", file_mapper.get_file_name(_PROBE_KEY), "/" + keys.key_for(_PROBE_KEY)),
        ]
        problems += [f"{what}: vLLM {a!r}, s3kv {b!r}" for what, a, b in pairs if a != b]
    return problems


def vllm_file_mapper(offloading_spec: Any) -> Any:
    """vLLM's ``FileMapper`` for the spec, built as its ``fs`` tier builds it (no root)."""
    # Imported here so a test can stand in a newer vLLM's FileMapper.
    from vllm.v1.kv_offload import file_mapper

    return file_mapper.FileMapper.from_offloading_spec(
        root_dir="",
        offloading_spec=offloading_spec,
        blocks_per_file=offloading_spec.blocks_per_chunk,
        parallel_agnostic=True,
    )


def namespace_of(file_mapper: Any, *, tier_type: str) -> Namespace:
    """The namespace vLLM's ``FileMapper`` hashes: its run config, read as a manifest is
    (fields s3kv does not know are kept as extra fields and hashed)."""
    try:
        return Namespace.from_manifest(dict(file_mapper.get_run_config()), rank=file_mapper.rank)
    except (ManifestError, InvalidNamespaceError) as exc:
        raise InvalidNamespaceError(
            f"s3kv tier {tier_type!r} refuses to start: vLLM's FileMapper hashes a run "
            f"config s3kv cannot take as a namespace ({exc}); use an s3kv release made "
            "for this vLLM"
        ) from None


def check_namespace(
    namespace: Namespace, offloading_spec: Any, *, tier_type: str, file_mapper: Any = None
) -> None:
    """Raise :class:`InvalidNamespaceError` naming each field or key where vLLM's
    ``FileMapper`` for ``offloading_spec`` and ``namespace`` differ."""
    mapper = file_mapper if file_mapper is not None else vllm_file_mapper(offloading_spec)
    problems = namespace_differences(namespace, mapper)
    if problems:
        raise InvalidNamespaceError(
            f"s3kv tier {tier_type!r} refuses to start: vLLM's own FileMapper and s3kv's "
            "namespace differ, so s3kv would read and write other keys than vLLM's tiers "
            "(every lookup would miss).\n  "
            + "\n  ".join(problems)
            + "\nUse an s3kv release that spells this vLLM's keys (s3kv.vllm is tested "
            "with vllm==0.32.0 and 0.33.0)."
        )


def tier_namespace(offloading_spec: Any, *, tier_type: str) -> Namespace:
    """The tier's namespace: vLLM's own run config, once the self-check passed."""
    mapper = vllm_file_mapper(offloading_spec)
    namespace = namespace_of(mapper, tier_type=tier_type)
    check_namespace(namespace, offloading_spec, tier_type=tier_type, file_mapper=mapper)
    return namespace
