"""Invalid input is refused at construction, with a ValueError from s3kv's tree."""

from __future__ import annotations

from typing import Any

import pytest

import s3kv
from s3kv import (
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidPrefixError,
    KeyMapper,
    ManifestError,
    Namespace,
    NotAnS3KVKeyError,
    make_offload_key,
    parse_key,
    split_offload_key,
)

pytestmark = pytest.mark.unit

GOOD: dict[str, Any] = {"model_name": "m/x", "tokens_per_hash": 16, "dtype": "float16"}
NS = Namespace(**GOOD)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model_name": ""}, "model_name"),
        ({"model_name": ".."}, "model_name"),
        ({"model_name": "a\nb"}, "control"),
        ({"tokens_per_hash": "16"}, "tokens_per_hash"),
        ({"tokens_per_hash": True}, "tokens_per_hash"),
        ({"tokens_per_hash": 16.0}, "tokens_per_hash"),
        ({"tokens_per_hash": 0}, "tokens_per_hash"),
        ({"blocks_per_file": -1}, "blocks_per_file"),
        ({"tp_size": 0}, "tp_size"),
        ({"pp_size": "2"}, "pp_size"),
        ({"pcp_size": False}, "pcp_size"),
        ({"dcp_size": 0}, "dcp_size"),
        ({"rank": -1}, "rank"),
        ({"dtype": ""}, "dtype"),
        ({"inference_engine": ""}, "inference_engine"),
        ({"parallel_agnostic": 1}, "parallel_agnostic"),
        ({"canonical_format": ""}, "canonical_format"),
        ({"kv_cache_groups": "layers"}, "kv_cache_groups"),
        ({"kv_cache_groups": [{"tokens_per_block": "16", "layer_names": []}]}, "tokens_per_block"),
        ({"kv_cache_groups": [{"tokens_per_block": 16, "layer_names": "l0"}]}, "layer_names"),
        ({"kv_cache_groups": [{"tokens_per_block": 16, "layer_names": ["a"], "x": 1}]}, "x"),
        ({"extra_fields": {"tp_size": 2}}, "extra_fields"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_namespace_rejects(change: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidNamespaceError) as info:
        Namespace(**{**GOOD, **change})
    assert field in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, s3kv.S3KVError)


def test_dtype_hashed_as_str_like_vllm() -> None:
    class TorchLikeDtype:
        def __str__(self) -> str:
            return "torch.bfloat16"

    ns = Namespace(**{**GOOD, "dtype": TorchLikeDtype()})
    assert ns.fields["dtype"] == "torch.bfloat16"


def test_namespace_is_immutable() -> None:
    with pytest.raises(Exception, match="frozen"):
        NS.tokens_per_hash = 32  # type: ignore[misc]


def test_parallel_agnostic_forces_sizes_and_rank() -> None:
    ns = Namespace(**GOOD, tp_size=4, pp_size=2, rank=7, parallel_agnostic=True)
    assert (ns.tp_size, ns.pp_size, ns.rank) == (1, 1, 0)
    assert "parallel_agnostic" not in ns.fields


@pytest.mark.parametrize(
    ("block_hash", "group"),
    [(b"ab", 0), ("abcdef", 0), (b"abc", -1), (b"abc", 2**32), (b"abc", True), (b"abc", 1.0)],
)
def test_bad_block_hash_or_group(block_hash: Any, group: Any) -> None:
    with pytest.raises(InvalidKeyError):
        NS_MAPPER.block_key(block_hash, group)
    with pytest.raises(InvalidKeyError):
        make_offload_key(block_hash, group)


NS_MAPPER = KeyMapper(NS, prefix="kv")


@pytest.mark.parametrize("key", [b"abc123", "abcdefgh", bytearray(b"abcdefgh"), None])
def test_bad_offload_key(key: Any) -> None:
    with pytest.raises(InvalidKeyError):
        NS_MAPPER.key_for(key)


def test_split_offload_key_rejects_short() -> None:
    with pytest.raises(InvalidKeyError, match="at least 7 bytes"):
        split_offload_key(b"\x00" * 6)


@pytest.mark.parametrize(
    "prefix", ["a//b", "a/./b", "../x", "a/..", "a\x00b", "tab\there", "x\x7f", 7, "a" * 1100]
)
def test_bad_prefix(prefix: Any) -> None:
    with pytest.raises(InvalidPrefixError):
        KeyMapper(NS, prefix=prefix)


def test_prefix_trimmed() -> None:
    assert KeyMapper(NS, prefix="/team/kv/").prefix == "team/kv"
    assert KeyMapper(NS, prefix="/").key_for(b"\x01\x02\x03\x00\x00\x00\x00").startswith("m_x_")


def test_key_over_1024_bytes_rejected() -> None:
    mapper = KeyMapper(NS, prefix="p" * 800)
    mapper.block_key(b"\x01" * 32)  # 32-byte hashes always fit
    with pytest.raises(InvalidPrefixError, match="1024"):
        mapper.block_key(b"\x01" * 100)
    with pytest.raises(InvalidPrefixError, match="1024"):
        mapper.key_for(b"\x01" * 100 + b"\x00" * 4)
    with pytest.raises(InvalidPrefixError):
        KeyMapper(NS, prefix="p" * 950)


def test_unknown_style() -> None:
    with pytest.raises(InvalidKeyError, match="style"):
        KeyMapper(NS, style="posix")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "key",
    [
        "",
        "config.json",
        "kv/model/config.json",
        "kv/m_0123456789ab_r0/abc/de_g0/abcdef.bin.tmp",
        "kv/m_0123456789ab_r0/abd/de_g0/abcdef.bin",  # fan-out folder disagrees with hash
        "kv/m_0123456789ab_r0/abc/df_g0/abcdef.bin",
        "kv/m_0123456789ab_r01/abc/de_g0/abcdef.bin",  # rank with a leading zero
        "kv/m_0123456789ab_r0/abc/de_g4294967296/abcdef.bin",
        "kv/m_0123456789AB_r0/abc/de_g0/abcdef.bin",
        "kv/m_0123456789ab_r0/abc/de_g0/abcde.bin",  # odd-length hex
        "../m_0123456789ab_r0/abc/de_g0/abcdef.bin",
        "a/../m_0123456789ab/config.json",
        "a/./m_0123456789ab/config.json",
        "a\\b/m_0123456789ab/config.json",
        "kv/m_0123456789ab_r0/abc/de_g0/abcdef.bin\n",
        "///m_0123456789ab/config.json",
    ],
)
def test_parse_key_rejects(key: str) -> None:
    with pytest.raises(NotAnS3KVKeyError, match="not an s3kv key"):
        parse_key(key)


def test_parse_key_accepts_minimal_block() -> None:
    parsed = parse_key("m_0123456789ab_r12/abc/de_g7/abcdef.bin")
    assert (parsed.prefix, parsed.rank, parsed.group_idx) == ("", 12, 7)
    assert parsed.block_hash == bytes.fromhex("abcdef")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"model_name": "m"}', "lacks required"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_from_manifest_rejects(data: bytes, match: str) -> None:
    with pytest.raises(ManifestError, match=match):
        Namespace.from_manifest(data)


def test_from_manifest_keeps_unknown_newer_fields_in_digest() -> None:
    fields = {**NS.fields, "kv_quant_scheme": "fp8-e4m3"}
    import hashlib
    import json

    expected = hashlib.sha256(
        json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()[:12]
    back = Namespace.from_manifest(json.dumps(fields, indent=2, sort_keys=True))
    assert back.digest == expected != NS.digest
    assert back.fields == fields
    assert back.manifest_bytes() == json.dumps(fields, indent=2, sort_keys=True).encode()


def test_from_manifest_rejects_inconsistent_agnostic_sizes() -> None:
    fields = Namespace(**GOOD, parallel_agnostic=True).fields
    fields["tp_size"] = 4
    with pytest.raises(ManifestError, match="inconsistent"):
        Namespace.from_manifest(fields)
