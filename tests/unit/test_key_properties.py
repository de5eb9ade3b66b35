"""Property-based tests: s3kv against an independent oracle, and round trips."""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3kv import (
    KeyMapper,
    Namespace,
    NotAnS3KVKeyError,
    ParsedKey,
    make_offload_key,
    parse_key,
    split_offload_key,
)
from s3kv.naming.keys import KEY_STYLES, KeyStyle

from .oracle import base_path, file_name, run_config

pytestmark = pytest.mark.unit

_name_chars = string.ascii_letters + string.digits + "-._/"
model_names = st.text(_name_chars, min_size=1, max_size=40).filter(
    lambda s: s.replace("/", "_") not in ("", ".", "..")
)
segment = st.text(string.ascii_letters + string.digits + "-._=+@", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)
prefixes = st.lists(segment, min_size=0, max_size=4).map("/".join)
sizes = st.integers(min_value=1, max_value=64)
groups = st.lists(
    st.fixed_dictionaries(
        {
            "tokens_per_block": st.integers(1, 512),
            "layer_names": st.lists(st.text(min_size=1, max_size=12), max_size=4),
        }
    ),
    max_size=3,
)
namespaces = st.fixed_dictionaries(
    {
        "model_name": model_names,
        "tokens_per_hash": sizes,
        "blocks_per_file": sizes,
        "tp_size": sizes,
        "pp_size": sizes,
        "pcp_size": sizes,
        "dcp_size": sizes,
        "rank": st.integers(0, 1023),
        "dtype": st.sampled_from(["float16", "bfloat16", "fp8_e4m3", "float32", "auto"]),
        "kv_cache_groups": st.one_of(st.none(), groups),
        "inference_engine": st.sampled_from(["vllm", "sglang"]),
        "parallel_agnostic": st.booleans(),
        "replicated_layout": st.booleans(),
        "canonical_format": st.one_of(st.none(), st.sampled_from(["v1-nhd", "v1-hnd"])),
    }
)
offload_keys = st.builds(
    make_offload_key,
    st.binary(min_size=3, max_size=32),
    st.integers(0, 2**32 - 1),
)


def _oracle(kw: dict[str, Any], root: str) -> tuple[dict[str, Any], str, int]:
    args = {k: v for k, v in kw.items() if k != "rank"}
    fields = run_config(**args)
    rank = 0 if kw["parallel_agnostic"] else kw["rank"]
    return fields, base_path(root, fields), rank


@settings(max_examples=300)
@given(namespaces, prefixes, st.lists(offload_keys, min_size=1, max_size=5))
def test_key_for_equals_filemapper(kw: dict[str, Any], prefix: str, keys: list[bytes]) -> None:
    ns = Namespace(**kw)
    fields, base, rank = _oracle(kw, prefix)
    assert ns.fields == fields
    mapper = KeyMapper(ns, prefix=prefix)
    for key in keys:
        expected = file_name(base, rank, key)
        got = mapper.key_for(key)
        assert (got if prefix else "/" + got) == expected
        assert not got.startswith("/")
    cfg = base + "/config.json"
    assert (mapper.config_key() if prefix else "/" + mapper.config_key()) == cfg


@settings(max_examples=200)
@given(namespaces, prefixes, st.sampled_from(["", "/", "//"]), offload_keys)
def test_vllm_obj_style_is_the_obj_tiers_filemapper_string_as_the_sdk_sends_it(
    kw: dict[str, Any], prefix: str, trailing: str, key: bytes
) -> None:
    # The obj tier's FileMapper root is f"{prefix}/"; NIXL's AWS C++ SDK drops the empty
    # path segments that makes (tests/data/vllm_obj_tier_wire_keys.json has the record).
    raw_prefix = prefix + trailing if prefix else prefix
    _, base, rank = _oracle(kw, f"{raw_prefix}/" if raw_prefix else "")
    on_the_wire = "/".join(s for s in file_name(base, rank, key).split("/") if s)
    ns = Namespace(**kw)
    obj = KeyMapper(ns, prefix=raw_prefix, style="vllm-obj")
    assert obj.key_for(key) == on_the_wire == KeyMapper(ns, prefix=prefix).key_for(key)


@settings(max_examples=500)
@given(namespaces, prefixes, offload_keys, st.sampled_from(KEY_STYLES))
def test_parse_key_is_the_exact_inverse_of_key_for(
    kw: dict[str, Any], prefix: str, key: bytes, style: KeyStyle
) -> None:
    ns = Namespace(**kw)
    mapper = KeyMapper(ns, prefix=prefix, style=style)
    built = mapper.key_for(key)
    parsed = parse_key(built)
    # Every part the key was built from comes back, and nothing else:
    assert parsed == ParsedKey(
        kind="block",
        style="s3kv",
        prefix=mapper.prefix,
        folder=ns.folder,
        model_part=ns.safe_model_name,
        digest=ns.digest,
        rank=ns.rank,
        group_idx=split_offload_key(key)[1],
        block_hash=split_offload_key(key)[0],
    )
    assert parsed.offload_key == key
    # ... and building from the parts gives the key back (push/pull's relative path too).
    assert parsed.key == built == mapper.root + parsed.relative_path
    assert KeyMapper(ns, prefix=parsed.prefix).key_for(parsed.offload_key) == built
    manifest = parse_key(mapper.config_key())
    assert manifest == ParsedKey(
        kind="manifest",
        style="s3kv",
        prefix=mapper.prefix,
        folder=ns.folder,
        model_part=ns.safe_model_name,
        digest=ns.digest,
    )
    assert manifest.key == mapper.config_key() == mapper.root + manifest.relative_path


@settings(max_examples=300)
@given(st.text(string.ascii_lowercase + string.digits + "_/.g", max_size=90))
def test_parse_key_accepts_only_what_key_for_builds(key: str) -> None:
    # The other direction: whatever parses is rebuilt, character for character.
    try:
        parsed = parse_key(key)
    except NotAnS3KVKeyError:
        return
    assert parsed.key == key


@pytest.mark.parametrize(
    "key",
    [
        "kv//m_0123456789ab_r0/000/10_g2/0001020304050607.bin",
        "/m_0123456789ab_r0/000/10_g2/0001020304050607.bin",
        "kv//m_0123456789ab/config.json",
        "kv/m_0123456789ab_r0/001/10_g2/0001020304050607.bin",
        "kv/m_0123456789ab_r0/000/11_g2/0001020304050607.bin",
    ],
)
def test_keys_no_system_writes_do_not_parse(key: str) -> None:
    # "//" and a leading "/" are FileMapper strings of the obj tier that never reach a
    # bucket; a fan-out folder that disagrees with the hash is no key s3kv builds.
    with pytest.raises(NotAnS3KVKeyError):
        parse_key(key)


@settings(max_examples=200)
@given(namespaces)
def test_manifest_round_trip(kw: dict[str, Any]) -> None:
    ns = Namespace(**kw)
    back = Namespace.from_manifest(ns.manifest_bytes(), rank=ns.rank)
    assert back.fields == ns.fields and back.digest == ns.digest
    assert back.manifest_bytes() == ns.manifest_bytes()


@given(st.binary(min_size=3, max_size=64), st.integers(0, 2**32 - 1))
def test_offload_key_round_trip(block_hash: bytes, group_idx: int) -> None:
    assert split_offload_key(make_offload_key(block_hash, group_idx)) == (block_hash, group_idx)


@given(st.text(max_size=80))
def test_parse_key_never_crashes(key: str) -> None:
    try:
        parsed = parse_key(key)
    except ValueError:
        return
    assert ".." not in parsed.prefix.split("/")
