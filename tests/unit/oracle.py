"""An independent oracle for vLLM's FileMapper, written from the layout facts.

Deliberately naive (no shared code with s3kv) so property tests compare two
implementations of the same rules. The real vLLM class is compared in tests/vllm.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def run_config(
    model_name: str,
    tokens_per_hash: int,
    blocks_per_file: int,
    tp_size: int,
    pp_size: int,
    pcp_size: int,
    dcp_size: int,
    dtype: str,
    kv_cache_groups: list[dict[str, Any]] | None,
    inference_engine: str,
    parallel_agnostic: bool,
    replicated_layout: bool,
    canonical_format: str | None,
) -> dict[str, Any]:
    if parallel_agnostic:
        tp_size = pp_size = pcp_size = dcp_size = 1
    fields: dict[str, Any] = dict(
        model_name=model_name,
        tokens_per_hash=tokens_per_hash,
        blocks_per_file=blocks_per_file,
        tp_size=tp_size,
        pp_size=pp_size,
        pcp_size=pcp_size,
        dcp_size=dcp_size,
        dtype=str(dtype),
        kv_cache_groups=kv_cache_groups or [],
        inference_engine=inference_engine,
    )
    if not parallel_agnostic:
        fields["parallel_agnostic"] = False
    if replicated_layout:
        fields["replicated_layout"] = True
    if canonical_format is not None:
        fields["canonical_format"] = canonical_format
    return fields


def base_path(root_dir: str, fields: dict[str, Any]) -> str:
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(blob).hexdigest()[:12]
    return root_dir + "/" + fields["model_name"].replace("/", "_") + "_" + digest


def file_name(base: str, rank: int, offload_key: bytes) -> str:
    h = offload_key[:-4].hex()
    g = int.from_bytes(offload_key[-4:], "big")
    return base + "_r" + str(rank) + "/" + h[0:3] + "/" + h[3:5] + "_g" + str(g) + "/" + h + ".bin"
