"""Issue 29, point 2: the record s3kv's tier writes in its manifest changes no key.

The tier (built by vLLM's own factory, on moto's S3 server) writes its manifest at start;
the stored config.json holds the run config of vLLM's real FileMapper for the same spec,
exactly, plus s3kv's record: this vLLM's version, this s3kv's, the time. Read back, it
hashes to FileMapper's own folder; pulled into a directory, vLLM's own fs tier starts on
it (it never reads config.json, and leaves it as it is) and finds every block. (Golden
vectors and old manifests: tests/unit/test_manifest_provenance.py.)
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from vllm.v1.kv_offload.base import LookupResult
from vllm.v1.kv_offload.file_mapper import FileMapper

from s3kv import Namespace, S3Settings, __version__
from s3kv.naming.manifest import PROVENANCE_FIELD
from s3kv.ops.sync import sync
from tests.vllm import harness as h

pytestmark = pytest.mark.vllm


def test_the_tier_records_its_vllm_and_keeps_filemappers_digest(
    make_tier: Any, s3_client: Any, bucket: str, moto_server: str, tmp_path: Path
) -> None:
    spec = h.spec(blocks_per_chunk=2)
    view, array = h.primary_view()
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    tier = make_tier(view, spec)
    fs = FileMapper.from_offloading_spec("team/kv", spec, blocks_per_file=2,
                                         parallel_agnostic=True)  # fmt: skip
    key = fs.get_config_file_path()
    stored = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    written = json.loads(stored)
    record = written.pop(PROVENANCE_FIELD)
    assert written == fs.get_run_config()  # vLLM's run config, field for field
    assert record["vllm_version"] == metadata.version("vllm")
    assert record["s3kv_version"] == __version__
    created = datetime.strptime(record["created"], "%Y-%m-%dT%H:%M:%SZ")
    assert before <= created.replace(tzinfo=timezone.utc) <= datetime.now(timezone.utc)
    read_back = Namespace.from_manifest(stored)
    assert f"team/kv/{read_back.folder}" == fs.base_path == f"team/kv/{tier.namespace.folder}"

    # vLLM's fs tier on a directory holding this manifest: started, finds the blocks
    ks = h.keys(2, start=300)
    h.fill(array, range(2), seed=300)
    assert h.run(tier, h.job(ks, range(2), load=False)).success
    pulled = sync(f"s3://{bucket}/team/kv", tmp_path,
                  settings=S3Settings.resolve(endpoint_url=moto_server))  # fmt: skip
    assert pulled.ok and pulled.copied > 0
    local_fs = h.fs_tier(view, spec, str(tmp_path))
    try:
        assert h.lookup(local_fs, ks) == [LookupResult.HIT] * 2
    finally:
        local_fs.shutdown()
    local = FileMapper.from_offloading_spec(str(tmp_path), spec, blocks_per_file=2,
                                            parallel_agnostic=True)  # fmt: skip
    assert Path(local.get_config_file_path()).read_bytes() == stored  # as s3kv wrote it
