"""``storage_format``: hashed as vLLM's development branch does, only when not None."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace
from typing import Any

import pytest

from s3kv import InvalidNamespaceError, Namespace


def _config() -> Any:
    """Duck-typed vLLM OffloadingConfig (what FileMapper.from_offloading_spec reads)."""
    return SimpleNamespace(
        model=SimpleNamespace(name="Qwen/Qwen3-0.6B", dtype="bfloat16"),
        cache=SimpleNamespace(tokens_per_hash=16, blocks_per_chunk=1),
        groups=[SimpleNamespace(tokens_per_block=16, layer_names=("l0", "l1"))],
        parallel=SimpleNamespace(
            rank=0, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, is_parallelism_agnostic=True
        ),
        replicated_layout=False,
        canonical_layout=False,
        kv_cache_layout=None,
    )


def _spec(**attrs: Any) -> Any:
    return SimpleNamespace(config=_config(), blocks_per_chunk=1, **attrs)


def _digest(fields: dict[str, Any]) -> str:
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def test_read_from_the_spec_and_hashed() -> None:
    ns = Namespace.from_vllm_config(_spec(storage_format="kv-raw-v2"), parallel_agnostic=True)
    plain = Namespace.from_vllm_config(_config(), parallel_agnostic=True)
    assert ns.fields == {**plain.fields, "storage_format": "kv-raw-v2"}
    assert ns.digest == _digest(ns.fields) != plain.digest
    assert ns.folder == f"Qwen_Qwen3-0.6B_{ns.digest}"


@pytest.mark.parametrize("spec", [_spec(), _spec(storage_format=None)])
def test_absent_or_none_leaves_the_digest_alone(spec: Any) -> None:
    ns = Namespace.from_vllm_config(spec, parallel_agnostic=True)
    assert "storage_format" not in ns.fields
    assert ns == Namespace.from_vllm_config(_config(), parallel_agnostic=True)


def test_an_explicit_argument_wins_over_the_spec() -> None:
    ns = Namespace.from_vllm_config(
        _spec(storage_format="a"), parallel_agnostic=True, storage_format="b"
    )
    assert ns.fields["storage_format"] == "b"


def test_manifest_round_trip_keeps_it_a_known_field() -> None:
    ns = Namespace.from_vllm_config(_spec(storage_format="kv-raw-v2"), parallel_agnostic=True)
    back = Namespace.from_manifest(ns.manifest_bytes())
    assert back == ns
    assert back.storage_format == "kv-raw-v2"
    assert dict(back.extra_fields) == {}


def test_empty_is_refused() -> None:
    with pytest.raises(InvalidNamespaceError, match="storage_format"):
        Namespace(model_name="m", tokens_per_hash=16, dtype="float16", storage_format="")
