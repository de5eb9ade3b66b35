"""The awscrt data path sends a bucket's requests where boto3 would (issue 20, point 2):
partitions, FIPS, dual-stack and addressing style come from botocore's own ruleset.
No request is sent: building the store only works out the address."""

from __future__ import annotations

import pytest

from s3kv import S3Settings
from s3kv.stores.crt import CrtS3Store

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("env", "region", "host"),
    [
        ({}, "us-east-1", "kv-cache.s3.amazonaws.com"),  # boto3: the global endpoint
        ({}, "us-west-2", "kv-cache.s3.us-west-2.amazonaws.com"),
        ({}, "cn-north-1", "kv-cache.s3.cn-north-1.amazonaws.com.cn"),
        (
            {"AWS_USE_FIPS_ENDPOINT": "true"},
            "us-west-2",
            "kv-cache.s3-fips.us-west-2.amazonaws.com",
        ),
        (
            {"AWS_USE_DUALSTACK_ENDPOINT": "true"},
            "eu-west-1",
            "kv-cache.s3.dualstack.eu-west-1.amazonaws.com",
        ),
    ],
)
def test_the_data_path_uses_botocores_endpoint(
    env: dict[str, str], region: str, host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    store = CrtS3Store("kv-cache", S3Settings.resolve(env={}, region=region))
    try:
        # today: always https://s3.<region>.amazonaws.com, whatever the partition or flags
        assert (store.target.host, store.target.path) == (host, "")
        assert store.request_path("a/b.bin") == "/a/b.bin"
    finally:
        store.close()


def test_a_bucket_with_dots_and_a_custom_endpoint_go_path_style() -> None:
    store = CrtS3Store("kv.cache", S3Settings.resolve(env={}, region="us-east-1"))
    try:
        assert (store.target.host, store.target.path) == ("s3.amazonaws.com", "/kv.cache")
    finally:
        store.close()
    custom = S3Settings.resolve(env={}, endpoint_url="http://gw.internal:8080/s3/", region="x")
    store = CrtS3Store("kv", custom)
    try:
        assert (store.target.host, store.target.path) == ("gw.internal:8080", "/s3/kv")
    finally:
        store.close()
