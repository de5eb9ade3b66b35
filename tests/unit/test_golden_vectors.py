"""Every vector vLLM 0.33.0's own FileMapper produced (tests/data/golden_file_mapper.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from s3kv import KeyMapper, Namespace, make_offload_key, parse_key

pytestmark = pytest.mark.unit

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "golden_file_mapper.json").read_text())
CASES = GOLDEN["cases"]


def _namespace(inputs: dict[str, Any]) -> tuple[str, Namespace]:
    inputs = dict(inputs)
    return inputs.pop("root_dir"), Namespace(**inputs)


def _as_filemapper_path(root_dir: str, key: str) -> str:
    # s3kv trims the prefix's leading "/" (object keys have none) and, for an empty
    # prefix, emits no leading "/" where FileMapper(root_dir="") would.
    return f"/{key}" if root_dir.startswith("/") or root_dir == "" else key


@pytest.mark.parametrize("case", CASES, ids=[c["base_path"] for c in CASES])
def test_run_config_digest_and_manifest(case: dict[str, Any]) -> None:
    root, ns = _namespace(case["inputs"])
    assert ns.fields == case["run_config"]
    assert ns.rank == (0 if case["inputs"].get("parallel_agnostic") else case["inputs"]["rank"])
    assert f"{root}/{ns.folder}" == case["base_path"]
    assert ns.digest == case["base_path"].rsplit("_", 1)[1]
    assert ns.manifest_bytes() == case["config_json"].encode()
    mapper = KeyMapper(ns, prefix=root)
    assert _as_filemapper_path(root, mapper.config_key()) == case["config_file_path"]


@pytest.mark.parametrize("case", CASES, ids=[c["base_path"] for c in CASES])
def test_block_keys(case: dict[str, Any]) -> None:
    root, ns = _namespace(case["inputs"])
    mapper = KeyMapper(ns, prefix=root)
    for f in case["files"]:
        block_hash = bytes.fromhex(f["block_hash_hex"])
        offload_key = make_offload_key(block_hash, f["group_idx"])
        assert offload_key.hex() == f["offload_key_hex"]
        key = mapper.key_for(offload_key)
        assert _as_filemapper_path(root, key) == f["file_name"]
        assert mapper.block_key(block_hash, f["group_idx"]) == key
        parsed = parse_key(key)
        assert parsed.offload_key == offload_key
        assert parsed.digest == ns.digest and parsed.rank == ns.rank
        assert parsed.prefix == root.strip("/")


@pytest.mark.parametrize("case", CASES, ids=[c["base_path"] for c in CASES])
def test_manifest_round_trip(case: dict[str, Any]) -> None:
    _, ns = _namespace(case["inputs"])
    back = Namespace.from_manifest(case["config_json"], rank=ns.rank)
    assert back.digest == ns.digest
    assert back.fields == ns.fields
    assert back.manifest_bytes() == ns.manifest_bytes()


OBJ = GOLDEN["vllm_obj_tier_keys"]
WIRE = json.loads(
    (Path(__file__).parents[1] / "data" / "vllm_obj_tier_wire_keys.json").read_text()
)
"""What vLLM's obj tier stored on moto's server and RGW 16 (scripts/record_vllm_obj_keys.py)."""
STORED = [c for c in WIRE["cases"] if c["stored"]]


def _drop_empty_segments(key: str) -> str:
    return "/".join(s for s in key.split("/") if s)


@pytest.mark.parametrize(
    "case", OBJ["cases"], ids=[c["prefix"] or "no-prefix" for c in OBJ["cases"]]
)
def test_vllm_obj_tier_filemapper_strings(case: dict[str, Any]) -> None:
    # golden_file_mapper.json holds the obj tier's FileMapper strings ("kv//folder...",
    # "/folder..."); the SDK sends them without the empty segments, which is s3kv's layout.
    ns = Namespace(
        model_name="meta-llama/Llama-3.1-8B-Instruct",
        tokens_per_hash=16,
        blocks_per_file=1,
        tp_size=2,
        rank=1,
        dtype="bfloat16",
        parallel_agnostic=True,
    )
    for style in ("vllm-obj", "s3kv"):
        mapper = KeyMapper(ns, prefix=case["prefix"], style=style)  # type: ignore[arg-type]
        key = mapper.block_key(bytes.fromhex("00a1b2c3d4e5f60718293a4b5c6d7e8f"), 0)
        assert key == _drop_empty_segments(case["object_key"])
        assert mapper.config_key() == _drop_empty_segments(case["config_key_if_written"])
    assert (parse_key(key).prefix, parse_key(key).digest) == (case["prefix"], ns.digest)


@pytest.mark.parametrize(
    "case", STORED, ids=[f"{c['server']}-{c['prefix'] or 'no-prefix'}" for c in STORED]
)
def test_vllm_obj_style_is_what_the_obj_tier_stored(case: dict[str, Any]) -> None:
    ns = Namespace.from_manifest(json.dumps(case["run_config"]))
    offload_keys = [bytes.fromhex(k) for k in case["offload_keys"]]
    for style in ("vllm-obj", "s3kv"):
        mapper = KeyMapper(ns, prefix=case["prefix"], style=style)  # type: ignore[arg-type]
        keys = mapper.keys_for(offload_keys)
        # exactly the objects in the bucket, and the paths the tier's requests named
        assert sorted(keys) == case["stored_keys"]
        bucket = case["requests"][0].split("/")[1]
        probe = f"HEAD /{bucket}/__nixl_probe__/connectivity_test"  # the tier's start-up check
        assert sorted(
            [f"{method} /{bucket}/{k}" for method in ("PUT", "HEAD", "GET") for k in keys]
            + [probe]
        ) == sorted(case["requests"])
    assert [_drop_empty_segments(k) for k in case["file_mapper_keys"]] == keys
    for key, offload_key in zip(keys, offload_keys, strict=True):
        parsed = parse_key(key)
        assert (parsed.prefix, parsed.offload_key) == (case["prefix"].strip("/"), offload_key)


def test_the_obj_tier_cannot_store_on_rgw_16_with_its_sdk_defaults() -> None:
    (default,) = [c for c in WIRE["cases"] if c["server"] == "rgw" and not c["env"]]
    assert not default["stored"] and default["stored_keys"] == []
    assert default["put_statuses"] == ["PUT 411"]
    assert {c["server"] for c in STORED} == {"moto", "rgw"}
    assert {c["prefix"] for c in STORED} == {"team/kv", "", "team/kv/"}


def test_one_full_path_pinned() -> None:
    # As vLLM's test_file_mapper.py does: one literal path, independent of the vectors.
    ns = Namespace(model_name="test-model", tokens_per_hash=16, dtype="float16", rank=3)
    key = KeyMapper(ns, prefix="mnt/kv").key_for(bytes.fromhex("000102030405060700000002"))
    assert key == "mnt/kv/test-model_de3bba26cf36_r3/000/10_g2/0001020304050607.bin"
