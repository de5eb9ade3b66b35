"""s3kv's keys equal vLLM's real FileMapper for any configuration, key and prefix."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.canonical_mapping import (
    KVCacheLayout,
)
from vllm.v1.kv_offload.base import make_offload_key
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.file_mapper import FileMapper
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

from s3kv import KeyMapper, Namespace

pytestmark = pytest.mark.vllm

names = st.text(st.sampled_from("abcXYZ019-_./"), min_size=1, max_size=24).filter(
    # s3kv refuses model names that cannot name a folder ("", ".", "..").
    lambda s: s.replace("/", "_") not in (".", "..")
)
segments = st.text(st.sampled_from("abz09-_.="), min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)
prefixes = st.lists(segments, max_size=3).map("/".join)
sizes = st.integers(1, 8)


@st.composite
def configs(draw: Any) -> tuple[OffloadingConfig, int]:
    groups = tuple(
        OffloadingGroupConfig(tokens_per_block=draw(st.sampled_from([1, 16, 32, 64])),
                              layer_names=tuple(draw(st.lists(names, max_size=3))), group_id=i)
        for i in range(draw(st.integers(0, 3)))
    )
    tp, pp = draw(sizes), draw(sizes)
    canonical = draw(st.booleans())
    config = OffloadingConfig(
        groups=groups,
        worker_kv_bytes_per_block=4096,
        enable_kv_cache_events=False,
        extra_config={"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 20},
        engine_id="keys",
        model=OffloadingModelConfig(name=draw(names),
                                    dtype=draw(st.sampled_from(["bfloat16", "float16", "fp8"]))),
        cache=OffloadingCacheConfig(tokens_per_hash=draw(st.sampled_from([1, 16, 32, 256])),
                                    blocks_per_chunk=draw(st.integers(1, 16))),
        parallel=OffloadingParallelConfig(
            rank=draw(st.integers(0, tp * pp - 1)), world_size=tp * pp, tp_size=tp,
            pp_size=pp, pcp_size=draw(sizes), dcp_size=draw(sizes), data_parallel_index=0,
            data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=draw(st.booleans())),
        replicated_layout=draw(st.booleans()),
        canonical_layout=canonical,
        kv_cache_layout=draw(st.sampled_from(list(KVCacheLayout.__members__))) if canonical
        else None,
    )
    return config, draw(st.integers(1, 16))


offload_keys = st.builds(make_offload_key, st.binary(min_size=3, max_size=40),
                         st.integers(0, 2**32 - 1))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), st.booleans(), prefixes, st.lists(offload_keys, min_size=1, max_size=8))
def test_keys_match_vllm_file_mapper(
    case: tuple[OffloadingConfig, int], agnostic: bool, prefix: str, keys: list[bytes]
) -> None:
    config, blocks_per_file = case
    spec = TieringOffloadingSpec(config)
    ns = Namespace.from_vllm_config(config, blocks_per_file=blocks_per_file,
                                    parallel_agnostic=agnostic)
    # The fs tier's root_dir is the prefix; s3kv keys have no leading "/" without one.
    fs = FileMapper.from_offloading_spec(prefix, spec, blocks_per_file=blocks_per_file,
                                         parallel_agnostic=agnostic)
    mapper = KeyMapper(ns, prefix=prefix)
    assert ns.fields == fs.get_run_config()
    assert json.loads(ns.manifest_bytes()) == fs.get_run_config()
    assert mapper.config_key() == fs.get_config_file_path().removeprefix("/")
    for key in keys:
        assert mapper.key_for(key) == fs.get_file_name(key).removeprefix("/")

    # vLLM's object-store tier: root_dir = f"{prefix}/" if prefix else "".
    obj = FileMapper.from_offloading_spec(f"{prefix}/" if prefix else "", spec,
                                          blocks_per_file=blocks_per_file,
                                          parallel_agnostic=agnostic)
    # Its FileMapper strings carry "//" (or a leading "/"); NIXL's AWS C++ SDK drops the
    # empty segments on the wire, so it stores s3kv's keys (see
    # tests/data/vllm_obj_tier_wire_keys.json).
    obj_mapper = KeyMapper(ns, prefix=prefix, style="vllm-obj")
    for key in keys:
        sent = "/".join(s for s in obj.get_file_name(key).split("/") if s)
        assert obj_mapper.key_for(key) == sent == mapper.key_for(key)


def test_the_tier_uses_the_fs_tiers_namespace(make_tier: Any) -> None:
    from tests.vllm import harness as h

    spec = h.spec(blocks_per_chunk=4)
    view, _ = h.primary_view()
    tier = make_tier(view, spec)
    fs = FileMapper.from_offloading_spec("team/kv", spec, blocks_per_file=4,
                                         parallel_agnostic=True)
    key = h.keys(1)[0]
    assert tier.uploader.keys.key_for(key) == fs.get_file_name(key)
    assert tier.namespace.fields == fs.get_run_config()


def test_the_key_command_prints_the_fs_tiers_names(tmp_path: Any) -> None:
    """``s3kv key`` as a user runs it, given the config.json vLLM's fs tier writes: the
    manifest key and each block's key are the paths vLLM's own FileMapper names."""
    import subprocess
    import sys

    from tests.vllm import harness as h

    spec = h.spec(blocks_per_chunk=4)
    fs = FileMapper.from_offloading_spec("/mnt/kv", spec, blocks_per_file=4,
                                         parallel_agnostic=True)
    manifest = tmp_path / "config.json"
    manifest.write_text(json.dumps(fs.get_run_config()))
    hashes = [bytes(range(i, i + 32)) for i in (0, 7)]
    done = subprocess.run(
        [sys.executable, "-m", "s3kv.cli", "key", "/mnt/kv", "--manifest", str(manifest),
         "--group-idx", "1", *[arg for b in hashes for arg in ("--block-hash", b.hex())],
         "--json"],
        capture_output=True, text=True, timeout=60, check=True)
    doc = json.loads(done.stdout)
    assert doc["manifest_key"] == fs.get_config_file_path()
    assert [b["key"] for b in doc["block_keys"]] == [
        fs.get_file_name(make_offload_key(b, 1)) for b in hashes]
