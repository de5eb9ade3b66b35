"""vLLM tier tests: vLLM 0.33.0's own classes, against moto's S3 server on loopback.

They run from ``.venv-vllm`` (``make vllm-venv``, then ``make test-vllm``). Without vLLM
they fail, never skip: ``test_environment.py`` says how to get it. Fixtures such as
``moto_server`` come from ``tests/conftest.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

try:
    import vllm.v1.kv_offload.tiering.spec  # noqa: F401

    VLLM_ERROR: str | None = None
except Exception as exc:  # ImportError, or vLLM failing to import its own deps
    VLLM_ERROR = f"{type(exc).__name__}: {exc}"

if VLLM_ERROR is not None:
    # Every other module imports vLLM at the top; only the environment check runs.
    collect_ignore_glob = ["test_[!e]*.py"]


@pytest.fixture
def s3_client(moto_server: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=moto_server,
        config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"),
    )


@pytest.fixture
def bucket(s3_client: Any) -> str:
    name = f"s3kv-vllm-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def make_tier(moto_server: str, bucket: str) -> Iterator[Callable[..., Any]]:
    """Build S3 tiers through vLLM's own factory; shut down at teardown."""
    from tests.vllm.harness import s3_tier

    tiers: list[Any] = []

    def make(view: memoryview, spec: Any, **options: Any) -> Any:
        tier = s3_tier(view, spec, url=f"s3://{bucket}/team/kv", endpoint_url=moto_server,
                       **options)
        tiers.append(tier)
        return tier

    yield make
    for tier in tiers:
        tier.shutdown()
