"""Issue 29, point 2: s3kv's record in the manifests it writes never changes a digest.

For every vector vLLM 0.33.0's own FileMapper produced (tests/data/golden_file_mapper.json),
the config.json vLLM writes with s3kv's record added reads back as the same namespace:
the same run config, digest and folder as FileMapper's ``base_path``. Manifests without the
record (vLLM's, older s3kv's) read as before, with nothing recorded; a record that is not
what s3kv writes reads as not recorded, never as a broken namespace. (The same against
vLLM's real FileMapper and the tier: tests/vllm/test_manifest_record.py.)
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from s3kv import InvalidNamespaceError, Namespace, Uploader, __version__
from s3kv.naming.manifest import (
    PROVENANCE_FIELD,
    Provenance,
    read_provenance,
    split_provenance,
    with_provenance,
)
from s3kv.transfers.stored_manifest import check_manifest

pytestmark = pytest.mark.unit

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "golden_file_mapper.json").read_text())
CASES = GOLDEN["cases"]
WHEN = datetime(2026, 12, 1, 3, 32, 39, tzinfo=timezone.utc)


@pytest.mark.parametrize("case", CASES, ids=[c["base_path"] for c in CASES])
def test_the_record_leaves_every_golden_digest_alone(case: dict[str, Any]) -> None:
    record = Provenance(WHEN, "0.1.0", "0.33.0")
    written = with_provenance(case["run_config"], record)
    folder = case["base_path"].rsplit("/", 1)[1]
    namespace, problem = check_manifest(written, folder)
    assert problem == "" and namespace is not None
    assert namespace.fields == case["run_config"]  # FileMapper.get_run_config()
    assert namespace.folder == folder and namespace.digest == folder.rsplit("_", 1)[1]
    assert read_provenance(written) == record
    # vLLM's own layout: its config.json plus one field, indent 2, sorted, no newline
    loaded = json.loads(written)
    assert loaded.pop(PROVENANCE_FIELD) == {
        "created": "2026-12-01T03:32:39Z", "s3kv_version": "0.1.0", "vllm_version": "0.33.0"}
    assert json.dumps(loaded, indent=2, sort_keys=True) == case["config_json"]
    assert not written.endswith(b"\n")


@pytest.mark.parametrize("case", CASES, ids=[c["base_path"] for c in CASES])
def test_manifests_without_the_record_still_read(case: dict[str, Any]) -> None:
    folder = case["base_path"].rsplit("/", 1)[1]
    namespace, problem = check_manifest(case["config_json"].encode(), folder)
    assert problem == "" and namespace is not None and namespace.folder == folder
    assert read_provenance(case["config_json"].encode()) is None


@pytest.mark.parametrize(
    "record",
    [
        "0.1.0",
        ["0.1.0"],
        {"created": "yesterday", "s3kv_version": "0.1.0\x1b[2J", "vllm_version": 33},
        {"created": "2026-12-01T03:32:39Z" * 3, "s3kv_version": "x" * 65},
    ],
)
def test_a_record_s3kv_never_writes_reads_as_not_recorded(record: Any) -> None:
    fields = {**CASES[0]["run_config"], PROVENANCE_FIELD: record}
    run_config, found = split_provenance(fields)
    assert run_config == CASES[0]["run_config"]
    assert found is None or found == Provenance(None, None, None)
    folder = CASES[0]["base_path"].rsplit("/", 1)[1]
    namespace, problem = check_manifest(json.dumps(fields).encode(), folder)
    assert problem == "" and namespace is not None and namespace.folder == folder


def test_the_field_is_s3kvs_alone() -> None:
    with pytest.raises(InvalidNamespaceError, match="s3kv's own record"):
        Namespace(model_name="m", tokens_per_hash=16, dtype="float16",
                  extra_fields={PROVENANCE_FIELD: 1})  # fmt: skip


def test_the_uploader_writes_the_record_and_the_same_folder(tmp_path: Path) -> None:
    ns = Namespace(model_name="org/m", tokens_per_hash=16, dtype="bfloat16",
                   kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l.0"]}])  # fmt: skip
    before = datetime.now(timezone.utc).replace(microsecond=0)
    with Uploader(tmp_path, ns, vllm_version="0.33.0") as up:
        up.put_blocks({(b"\x01" * 32, 0): b"row"})
    written = (tmp_path / ns.folder / "config.json").read_bytes()
    record = read_provenance(written)
    assert record is not None and record.created is not None
    assert record.s3kv_version == __version__ and record.vllm_version == "0.33.0"
    assert before <= record.created <= datetime.now(timezone.utc)
    assert Namespace.from_manifest(written).folder == ns.folder
    # a second writer of the same namespace (another version, later) is no conflict
    with Uploader(tmp_path, ns) as up:
        assert up.put_blocks({(b"\x02" * 32, 0): b"row"}).ok
    assert (tmp_path / ns.folder / "config.json").read_bytes() == written
