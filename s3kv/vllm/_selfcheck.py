"""Start-up self-check: s3kv's namespace against vLLM's own ``FileMapper`` for one spec.

s3kv re-implements ``FileMapper``'s hashing so that the library and CLI work without
vLLM. Inside vLLM the real one is at hand, so the tier builds it for the same spec (as
the ``fs`` tier does) and compares: a field a newer vLLM hashes and s3kv does not know
would otherwise move every key to another folder and miss every block, silently.
"""

from __future__ import annotations

from typing import Any

from s3kv.errors import InvalidNamespaceError
from s3kv.keys import KeyMapper
from s3kv.namespace import Namespace

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


def check_namespace(namespace: Namespace, offloading_spec: Any, *, tier_type: str) -> None:
    """Raise :class:`InvalidNamespaceError` naming each field where vLLM's ``FileMapper``
    for ``offloading_spec`` (built as the ``fs`` tier builds it) and ``namespace`` differ.
    """
    # Imported here so a test can stand in a newer vLLM's FileMapper.
    from vllm.v1.kv_offload import file_mapper

    mapper = file_mapper.FileMapper.from_offloading_spec(
        root_dir="",
        offloading_spec=offloading_spec,
        blocks_per_file=offloading_spec.blocks_per_chunk,
        parallel_agnostic=True,
    )
    problems = namespace_differences(namespace, mapper)
    if problems:
        raise InvalidNamespaceError(
            f"s3kv tier {tier_type!r} refuses to start: vLLM's own FileMapper and s3kv's "
            "namespace differ, so s3kv would read and write other keys than vLLM's tiers "
            "(every lookup would miss).\n  "
            + "\n  ".join(problems)
            + "\nUse an s3kv release that knows this vLLM's fields (s3kv.vllm supports "
            "vllm==0.33.0)."
        )
