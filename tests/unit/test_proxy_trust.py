"""Which CAs an ``https://`` proxy is checked against, per data path (issue 38, point 7).

boto3's client gets ``S3KV_PROXY_CA_BUNDLE``, else the AWS profile's ``proxy_ca_bundle``,
as botocore's ``proxies_config`` (botocore reads the profile's key but does not apply it
to a client itself). awscrt's S3 client takes no CA for its proxy, so the awscrt data path
refuses to start when one is set for an ``https://`` proxy it would use, and only then.
Building a store sends no request; tests/faults/test_network.py does it on the wire.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from s3kv import S3Settings, SettingsError
from s3kv.stores import S3Store
from s3kv.stores.crt import CrtS3Store

pytestmark = pytest.mark.unit

ENDPOINT = "https://s3.internal:9443"


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "proxy-ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")  # read by no one before a request
    return path


def profile_with(tmp_path: Path, ca: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config"
    config.write_text(f"[profile behind-proxy]\nproxy_ca_bundle = {ca}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "behind-proxy")


@pytest.mark.parametrize("source", ["S3KV_PROXY_CA_BUNDLE", "profile"])
def test_boto3s_client_trusts_the_proxy_ca(
    source: str, ca: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if source == "profile":
        profile_with(tmp_path, ca, monkeypatch)
    else:
        monkeypatch.setenv("S3KV_PROXY_CA_BUNDLE", str(ca))
    store = S3Store("kv", S3Settings.resolve(endpoint_url=ENDPOINT, data_path="botocore"))
    try:
        assert store.client.meta.config.proxies_config == {"proxy_ca_bundle": str(ca)}
        assert store.network.proxy_ca_bundle == str(ca)
    finally:
        store.close()


def test_a_profiles_missing_proxy_ca_is_a_settings_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile_with(tmp_path, tmp_path / "gone.pem", monkeypatch)
    with pytest.raises(SettingsError, match=r"proxy_ca_bundle.*not a readable file"):
        S3Store("kv", S3Settings.resolve(endpoint_url=ENDPOINT))


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        ({"HTTPS_PROXY": "https://proxy.internal:3128"}, True),
        ({"https_proxy": "https://proxy.internal:3128"}, True),
        ({"HTTPS_PROXY": "http://proxy.internal:3128"}, False),  # no TLS to the proxy
        ({"HTTPS_PROXY": "https://proxy.internal:3128", "NO_PROXY": "s3.internal"}, False),
        ({"HTTP_PROXY": "https://proxy.internal:3128"}, False),  # carries http:// only
        ({}, False),
    ],
)
def test_awscrt_refuses_a_proxy_ca_only_where_it_would_need_one(
    env: dict[str, str], refused: bool, ca: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                 "no_proxy"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = S3Settings.resolve(endpoint_url=ENDPOINT, proxy_ca_bundle=str(ca))
    if refused:
        with pytest.raises(SettingsError) as info:
            CrtS3Store("kv", settings)
        message = str(info.value)
        assert "https://proxy.internal:3128" in message and "S3KV_PROXY_CA_BUNDLE" in message
        assert "S3KV_DATA_PATH=botocore" in message
        return
    CrtS3Store("kv", settings).close()
    # without a proxy CA the system's CAs are awscrt's, as boto3's: nothing to refuse
    CrtS3Store("kv", S3Settings.resolve(endpoint_url=ENDPOINT)).close()
