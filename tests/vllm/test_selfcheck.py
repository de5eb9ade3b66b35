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


def test_a_spec_field_vllm_0_33_does_not_hash_changes_nothing(make_tier: Any) -> None:
    # vLLM 0.33.0's FileMapper does not hash storage_format: the tier takes vLLM's own
    # run config as its namespace, so it names vLLM's folder (it used to refuse).
    spec = harness.spec()
    spec.storage_format = "kv-raw-v2"
    view, _ = harness.primary_view()
    tier = make_tier(view, spec)
    assert "storage_format" not in tier.namespace.fields
    assert tier.namespace.folder == _vllm_mapper(harness.spec()).base_path.lstrip("/")


class OtherKeysFileMapper(FileMapper):  # type: ignore[misc]
    """A vLLM that hashes as 0.33.0 but spells block keys another way."""

    def get_file_name(self, key: bytes) -> str:
        return super().get_file_name(key).replace("_g", "_group", 1)


class OtherDigestFileMapper(FileMapper):  # type: ignore[misc]
    """A vLLM that names folders with a longer digest."""

    @staticmethod
    def _compute_base_path(root_dir: str, fields: dict) -> str:
        return FileMapper._compute_base_path(root_dir, fields) + "abcd"


@pytest.mark.parametrize(
    ("mapper_cls", "named"),
    [(OtherKeysFileMapper, "block key: vLLM '/"), (OtherDigestFileMapper, "folder: vLLM '")],
)
def test_keys_spelled_otherwise_stop_the_tier(
    make_tier: Any, monkeypatch: pytest.MonkeyPatch, bucket: str, s3_client: Any,
    mapper_cls: type, named: str,
) -> None:
    """The self-check stays the guard: however the namespace was found, a vLLM whose
    keys s3kv would not spell alike never starts the tier."""
    monkeypatch.setattr(vllm_file_mapper, "FileMapper", mapper_cls)
    view, _ = harness.primary_view()
    with pytest.raises(InvalidNamespaceError) as info:
        make_tier(view, harness.spec())
    assert "refuses to start" in str(info.value) and named in str(info.value)
    # refused before any request: nothing was written
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


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
