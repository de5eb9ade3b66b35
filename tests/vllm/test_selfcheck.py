"""The tier's start-up self-check against vLLM's own FileMapper (s3kv.vllm._selfcheck).

vLLM's development branch hashes ``offloading_spec.storage_format`` (only when not None).
``DevFileMapper`` stands in for it: vLLM 0.33.0's FileMapper plus the fields a newer
vLLM hashes, the base path recomputed by 0.33.0's own ``_compute_base_path``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from vllm.v1.kv_offload import file_mapper as vllm_file_mapper
from vllm.v1.kv_offload.file_mapper import FileMapper

from s3kv import InvalidNamespaceError, Namespace
from s3kv.vllm._selfcheck import namespace_differences
from tests.vllm import harness

pytestmark = pytest.mark.vllm


class DevFileMapper(FileMapper):  # type: ignore[misc]
    """vLLM 0.33.0's FileMapper hashing what its development branch adds."""

    extra: ClassVar[dict[str, Any]] = {}

    @classmethod
    def from_offloading_spec(
        cls, root_dir: str, offloading_spec: Any, blocks_per_file: int = 1,
        parallel_agnostic: bool = False,
    ) -> FileMapper:
        mapper = FileMapper.from_offloading_spec(
            root_dir, offloading_spec, blocks_per_file, parallel_agnostic)
        storage_format = getattr(offloading_spec, "storage_format", None)
        if storage_format is not None:  # as the development branch: only when not None
            mapper.fields["storage_format"] = storage_format
        mapper.fields.update(cls.extra)
        mapper.base_path = FileMapper._compute_base_path(root_dir, mapper.fields)
        return mapper


@pytest.fixture
def dev_vllm(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Make vLLM's file_mapper module hand out DevFileMapper (hashing ``extra`` too)."""

    def use(**extra: Any) -> None:
        monkeypatch.setattr(DevFileMapper, "extra", extra)
        monkeypatch.setattr(vllm_file_mapper, "FileMapper", DevFileMapper)

    return use


def _vllm_mapper(spec: Any, mapper_cls: type[FileMapper] = FileMapper) -> FileMapper:
    return mapper_cls.from_offloading_spec(
        "", spec, blocks_per_file=spec.blocks_per_chunk, parallel_agnostic=True)


def test_the_tier_starts_when_vllm_agrees(make_tier: Any) -> None:
    spec = harness.spec(blocks_per_chunk=2)
    view, _ = harness.primary_view()
    tier = make_tier(view, spec)
    assert namespace_differences(tier.namespace, _vllm_mapper(spec)) == []
    assert tier.namespace.folder == _vllm_mapper(spec).base_path.lstrip("/")


def test_storage_format_is_hashed_as_vllm_dev_does(
    make_tier: Any, dev_vllm: Callable[..., None]
) -> None:
    dev_vllm()
    spec = harness.spec()
    spec.storage_format = "kv-raw-v2"
    view, _ = harness.primary_view()
    tier = make_tier(view, spec)  # the self-check passed: s3kv and "vLLM" agree
    dev = _vllm_mapper(spec, DevFileMapper)
    assert tier.namespace.fields["storage_format"] == "kv-raw-v2"
    assert tier.namespace.fields == dev.get_run_config()
    key = harness.keys(1)[0]
    assert tier.uploader.keys.key_for(key) == "team/kv" + dev.get_file_name(key)
    # and it moves the folder: a cache of another storage format is another namespace
    assert tier.namespace.folder != _vllm_mapper(harness.spec()).base_path.lstrip("/")


def test_storage_format_none_changes_nothing(make_tier: Any, dev_vllm: Callable[..., None]) -> None:
    dev_vllm()
    spec = harness.spec()
    spec.storage_format = None
    view, _ = harness.primary_view()
    tier = make_tier(view, spec)
    assert "storage_format" not in tier.namespace.fields
    assert tier.namespace.folder == _vllm_mapper(harness.spec()).base_path.lstrip("/")


def test_vllm_0_33_which_ignores_storage_format_is_refused(make_tier: Any) -> None:
    # vLLM 0.33.0's FileMapper does not hash it: s3kv would name another folder.
    spec = harness.spec()
    spec.storage_format = "kv-raw-v2"
    view, _ = harness.primary_view()
    with pytest.raises(InvalidNamespaceError) as info:
        make_tier(view, spec)
    message = str(info.value)
    assert "refuses to start" in message
    assert "storage_format: s3kv hashes 'kv-raw-v2', vLLM does not" in message


def test_a_field_s3kv_does_not_know_stops_the_tier(
    make_tier: Any, dev_vllm: Callable[..., None], bucket: str, s3_client: Any
) -> None:
    dev_vllm(kv_quant_scheme="fp8-e4m3")
    view, _ = harness.primary_view()
    with pytest.raises(InvalidNamespaceError) as info:
        make_tier(view, harness.spec())
    message = str(info.value)
    assert "kv_quant_scheme: vLLM hashes 'fp8-e4m3', s3kv does not know it" in message
    assert "folder: vLLM" in message
    # refused before any request: nothing was written
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def test_a_field_hashed_differently_is_named(make_tier: Any, dev_vllm: Callable[..., None]) -> None:
    dev_vllm(inference_engine="vllm-next")
    view, _ = harness.primary_view()
    with pytest.raises(InvalidNamespaceError, match="inference_engine: vLLM hashes 'vllm-next', "
                       "s3kv 'vllm'"):
        make_tier(view, harness.spec())


def test_differences_cover_rank_and_keys() -> None:
    spec = harness.spec()
    mapper = _vllm_mapper(spec)
    namespace = Namespace.from_vllm_config(spec, blocks_per_file=1, parallel_agnostic=True)
    assert namespace_differences(namespace, mapper) == []
    mapper.rank = 2
    assert namespace_differences(namespace, mapper) == ["rank: vLLM 2, s3kv 0"]
    mapper.rank = 0
    mapper.base_path = mapper.base_path.replace("Qwen_", "Qwen-")
    assert namespace_differences(namespace, mapper)[0].startswith("folder: vLLM '")
