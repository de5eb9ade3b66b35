"""Faults on the wire (a proxy in front of moto's server): any data path, awscrt's too."""

from __future__ import annotations

import os

import numpy as np
import pytest

from s3kv import Downloader, S3Settings, Uploader, make_offload_key
from tests.conftest import _bucket_name, _s3_client
from tests.faults.proxy import FaultProxy

pytestmark = pytest.mark.integration

NS_KW = {"model_name": "wire/test", "tokens_per_hash": 16, "dtype": "float16"}


@pytest.fixture(params=["crt", "botocore"])
def data_path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def bucket(moto_server: str) -> str:
    name = _bucket_name()
    _s3_client(moto_server).create_bucket(Bucket=name)
    return name


def settings(endpoint: str, data_path: str, attempts: int) -> S3Settings:
    return S3Settings.resolve(
        endpoint_url=endpoint,
        data_path=data_path,
        max_attempts=attempts,
        backoff_base_seconds=0.001,
        concurrency=8,
    )


def chain(n: int) -> list[bytes]:
    return [make_offload_key(os.urandom(32), 0) for _ in range(n)]


def test_throttling_errors_and_resets_are_retried(
    moto_server: str, bucket: str, data_path: str
) -> None:
    from s3kv import Namespace

    ns = Namespace(**NS_KW)
    keys = chain(24)
    rows = np.random.default_rng(5).integers(0, 256, (24, 20000), dtype=np.uint8)
    faults = ["503", "500", "reset"]

    def rule(method: str, path: str, attempt: int) -> str | None:
        if path.endswith(".bin") and attempt == 1:
            return faults[hash(path) % 3] if method == "PUT" else "short"
        return None

    with FaultProxy(moto_server, lambda r: rule(r.method, r.path, r.attempt),
                    cut_after=5000) as proxy:
        s = settings(proxy.url, data_path, attempts=5)
        with Uploader(f"s3://{bucket}/kv", ns, settings=s) as up:
            stored = up.put_blocks(dict(zip(keys, rows)))
        out = np.zeros_like(rows)
        with Downloader(f"s3://{bucket}/kv", ns, settings=s) as down:
            loaded = down.get_blocks(keys, into=list(out))
    assert stored.ok and len(stored.stored) + len(stored.already_present) == 24
    assert loaded.ok and len(loaded.loaded) == 24
    np.testing.assert_array_equal(out, rows)
    kinds = {r.fault for r in proxy.injected()}
    assert kinds == {"503", "500", "reset", "short"}


def test_persistent_faults_fail_exactly_the_affected_keys(
    moto_server: str, bucket: str, data_path: str
) -> None:
    from s3kv import Namespace

    ns = Namespace(**NS_KW)
    keys = chain(10)
    bad = {k[:-4].hex() for k in keys[:3]}

    def rule(method: str, path: str, attempt: int) -> str | None:
        name = path.rsplit("/", 1)[-1].removesuffix(".bin")
        if name in bad:
            return "503" if method == "PUT" else "reset"
        return None

    with FaultProxy(moto_server, lambda r: rule(r.method, r.path, r.attempt)) as proxy:
        s = settings(proxy.url, data_path, attempts=2)
        with Uploader(f"s3://{bucket}/kv", ns, settings=s) as up:
            report = up.put_blocks({k: b"w" * 4096 for k in keys})
        assert set(report.failed) == set(keys[:3]) and set(report.stored) == set(keys[3:])
        direct = settings(moto_server, data_path, attempts=2)
        with Downloader(f"s3://{bucket}/kv", ns, settings=direct) as down:
            assert down.contains(keys) == [False] * 3 + [True] * 7
    assert proxy.injected()
