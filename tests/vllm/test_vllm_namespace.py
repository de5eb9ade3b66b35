"""Inside vLLM the namespace is vLLM's own run config; other vLLM releases by override.

A vLLM that hashes a field s3kv does not know (open vLLM pull requests add
``kv_cache_layout`` and ``storage_format``) keeps working: the field is carried as an
extra field, the keys agree with vLLM's ``FileMapper``, and the manifest holds it. An
untested vLLM release starts only when ``S3KV_ALLOW_VLLM_VERSION`` allows it and the
self-check passes, with one warning line.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from typing import Any

import pytest
from vllm.v1.kv_offload import file_mapper as vllm_file_mapper
from vllm.v1.kv_offload.file_mapper import FileMapper

import s3kv.vllm
from s3kv import Downloader, InvalidNamespaceError, Namespace, S3Settings
from tests.vllm import harness

pytestmark = pytest.mark.vllm


class NewerFileMapper(FileMapper):  # type: ignore[misc]
    """vLLM 0.33.0's FileMapper plus a field a newer vLLM hashes (vLLM PR 55907)."""

    @classmethod
    def from_offloading_spec(cls, root_dir: str, offloading_spec: Any, blocks_per_file: int = 1,
                             parallel_agnostic: bool = False) -> FileMapper:
        mapper = FileMapper.from_offloading_spec(root_dir, offloading_spec, blocks_per_file,
                                                 parallel_agnostic)
        mapper.fields["kv_cache_layout"] = "NHD"
        mapper.base_path = FileMapper._compute_base_path(root_dir, mapper.fields)
        return mapper


def test_a_field_a_newer_vllm_hashes_is_carried_and_keys_agree(
    make_tier: Any, monkeypatch: pytest.MonkeyPatch, s3_client: Any, bucket: str,
    moto_server: str,
) -> None:
    monkeypatch.setattr(vllm_file_mapper, "FileMapper", NewerFileMapper)
    spec = harness.spec()
    view, array = harness.primary_view()
    tier = make_tier(view, spec)  # before: refused ("s3kv does not know it")
    newer = NewerFileMapper.from_offloading_spec("team/kv", spec, blocks_per_file=1,
                                                 parallel_agnostic=True)
    assert tier.namespace.extra_fields == {"kv_cache_layout": "NHD"}
    assert tier.namespace.fields == newer.get_run_config()
    ks = harness.keys(3, start=40)
    harness.fill(array, range(3), seed=40)
    assert harness.run(tier, harness.job(ks, [0, 1, 2], load=False)).success
    stored = {o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert stored == {newer.get_file_name(k) for k in ks} | {newer.get_config_file_path()}
    manifest = json.loads(s3_client.get_object(
        Bucket=bucket, Key=newer.get_config_file_path())["Body"].read())
    assert manifest.pop("s3kv")["s3kv_version"]  # s3kv's record: never hashed, never read
    assert manifest["kv_cache_layout"] == "NHD" and manifest == newer.get_run_config()
    # s3kv without vLLM reads the cache back from its manifest alone
    namespace = Namespace.from_manifest(json.dumps(manifest))
    settings = S3Settings.resolve(endpoint_url=moto_server, max_attempts=2)
    with Downloader(f"s3://{bucket}/team/kv", namespace, settings=settings) as down:
        assert down.lookup(ks) == 3


GATE_CASES = [
    ("0.34.0", None, "refused: s3kv.vllm supports vllm==0.32.0 or vllm==0.33.0 only"),
    ("0.34.0", None, "set S3KV_ALLOW_VLLM_VERSION=0.34.0"),
    ("0.34.0", "0.34.0", "imported vllm 0.34.0"),
    ("0.34.0+cu129", "0.34.0", "imported vllm 0.34.0+cu129"),
    ("0.34.0", "1", "imported vllm 0.34.0"),
    ("0.34.0", "0.35.0", "refused:"),  # allows another release, not this one
    ("0.33.0", None, "imported None"),  # supported: no override needed
]

# One interpreter for every case (vLLM imports once): s3kv.vllm is imported afresh each
# time, with the installed version and the environment of the case.
_GATE = """
import json, os, sys
from importlib import metadata
real = metadata.version
for found, allow in json.loads(sys.argv[1]):
    metadata.version = lambda name, found=found: found if name == "vllm" else real(name)
    os.environ.pop("S3KV_ALLOW_VLLM_VERSION", None)
    if allow is not None:
        os.environ["S3KV_ALLOW_VLLM_VERSION"] = allow
    for name in [m for m in sys.modules if m.startswith("s3kv.vllm")]:
        del sys.modules[name]
    try:
        import s3kv.vllm
    except ImportError as exc:
        print("refused:", str(exc).replace(chr(10), " "))
    else:
        print("imported", s3kv.vllm.UNSUPPORTED_VLLM)
"""


def test_the_version_gate_has_an_explicit_override() -> None:
    cases = [(found, allow) for found, allow, _ in GATE_CASES]
    proc = subprocess.run([sys.executable, "-c", _GATE, json.dumps(cases)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(GATE_CASES), proc.stdout
    for (found, allow, expected), line in zip(GATE_CASES, lines):
        assert expected in line, (found, allow, line)


def test_an_untested_vllm_starts_with_one_warning_line_when_keys_agree(
    make_tier: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(s3kv.vllm, "UNSUPPORTED_VLLM", "vllm 0.34.0")
    view, _ = harness.primary_view()
    with caplog.at_level(logging.WARNING, logger="s3kv.vllm"):
        make_tier(view, harness.spec())
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    line = warnings[0].getMessage()
    assert "\n" not in line and "vllm 0.34.0" in line and "S3KV_ALLOW_VLLM_VERSION" in line


class OtherKeysFileMapper(FileMapper):  # type: ignore[misc]
    def get_file_name(self, key: bytes) -> str:
        return super().get_file_name(key).replace(".bin", ".kv")


def test_an_untested_vllm_whose_keys_differ_never_starts(
    make_tier: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3kv.vllm, "UNSUPPORTED_VLLM", "vllm 0.34.0")
    monkeypatch.setattr(vllm_file_mapper, "FileMapper", OtherKeysFileMapper)
    view, _ = harness.primary_view()
    with pytest.raises(InvalidNamespaceError, match="refuses to start"):
        make_tier(view, harness.spec())
