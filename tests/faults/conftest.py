"""Fixtures of the wire-fault tests: moto's server behind :class:`FaultProxy`, both data
paths, short timeouts (connect and read 0.5 s) so a stalled request costs little."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from s3kv import Namespace, S3Settings, Uploader, make_offload_key
from s3kv.cli import main
from tests.conftest import _bucket_name, _s3_client
from tests.faults.proxy import FaultProxy, Rule

CONNECT = READ = 0.5
"""Timeouts of every test here (seconds): a stalled attempt ends after CONNECT + READ on
awscrt (it cannot tell a slow connect from a silent server) and READ on botocore."""
BLOCK = 4096
NS = Namespace(model_name="faults/test", tokens_per_hash=16, dtype="float16")


@pytest.fixture(params=["crt", "botocore"])
def data_path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def bucket(moto_server: str) -> str:
    name = _bucket_name()
    _s3_client(moto_server).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3(moto_server: str) -> Any:
    """A plain boto3 client straight to moto (behind s3kv's back)."""
    return _s3_client(moto_server)


@pytest.fixture
def proxy(moto_server: str) -> Iterator[Callable[..., FaultProxy]]:
    """``proxy(rule, **options)``: a :class:`FaultProxy` in front of moto, closed after."""
    made: list[FaultProxy] = []

    def make(rule: Rule | None = None, **options: Any) -> FaultProxy:
        p = FaultProxy(moto_server, rule, **options)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def settings(endpoint: str, data_path: str, **overrides: Any) -> S3Settings:
    values: dict[str, Any] = {
        "endpoint_url": endpoint,
        "data_path": data_path,
        "connect_timeout_seconds": CONNECT,
        "read_timeout_seconds": READ,
        "max_attempts": 3,
        "backoff_base_seconds": 0.01,
        "backoff_max_seconds": 0.05,
        "deadline_seconds": 20,
        "concurrency": 8,
        **overrides,
    }
    return S3Settings.resolve(**values)


def keys(n: int) -> list[bytes]:
    return [make_offload_key(os.urandom(32), 0) for _ in range(n)]


def rows(n: int, seed: int = 0, size: int = BLOCK) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, size), dtype=np.uint8)


def seed_blocks(url: str, endpoint: str, n: int, *, size: int = BLOCK) -> list[bytes]:
    """``n`` blocks (and the manifest) stored straight at moto; their keys."""
    ks = keys(n)
    with Uploader(url, NS, settings=settings(endpoint, "botocore")) as up:
        assert up.put_blocks(dict(zip(ks, rows(n, size=size)))).ok
    return ks


def write_tree(root: Path, n: int, *, size: int = BLOCK) -> list[bytes]:
    """A directory cache of ``n`` blocks (vLLM's layout, with its manifest)."""
    ks = keys(n)
    with Uploader(root, NS) as up:
        assert up.put_blocks(dict(zip(ks, rows(n, size=size)))).ok
    return ks


def cli(
    capsys: pytest.CaptureFixture[str],
    *argv: str,
    endpoint: str | None,
    data_path: str,
    **extra: str,
) -> tuple[int, str, str]:
    """Run ``s3kv`` in this process (quicker than a new one) with the test timeouts;
    ``extra`` sets more environment variables (``S3KV_MAX_ATTEMPTS="2"``)."""
    env = {
        "S3KV_ENDPOINT_URL": endpoint or "",
        "S3KV_DATA_PATH": data_path,
        "S3KV_CONNECT_TIMEOUT": str(CONNECT),
        "S3KV_READ_TIMEOUT": str(READ),
        "S3KV_MAX_ATTEMPTS": "3",
        "S3KV_DEADLINE_SECONDS": "20",
        "S3KV_CONCURRENCY": "8",
        **extra,
    }
    with pytest.MonkeyPatch.context() as patch:  # restored when the command ends
        for name, value in env.items():
            patch.setenv(name, value)
        capsys.readouterr()
        code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
