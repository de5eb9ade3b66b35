"""Every request goes where the user's network says (issue 26, point 4).

The store's name resolves nowhere (``s3.via-proxy.test``): only the forward proxy named by
``HTTP_PROXY``/``HTTPS_PROXY`` (upper or lower case) reaches it, as plain HTTP or through
a CONNECT tunnel to a TLS endpoint. Blocks of every size go through it on both data paths,
the CLI and the library; ``NO_PROXY`` bypasses it; a dead proxy is a one-line error naming
it (JSON with ``--json``); a profile's ``ca_bundle`` is trusted.

Issue 38, point 7: an ``https://`` proxy whose certificate comes from a private CA (not
the store's) is trusted with ``S3KV_PROXY_CA_BUNDLE`` or the profile's ``proxy_ca_bundle``
on boto3's data path; awscrt cannot be given a CA for its proxy, so its data path refuses
to start with one set, naming the setting and the way out.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from s3kv import Downloader, SettingsError, StoreError, Uploader
from tests.faults.conftest import NS, cli, keys, rows, settings, write_tree
from tests.faults.forward_proxy import ForwardProxy
from tests.faults.proxy import FaultProxy
from tests.servers.rgw_cluster import make_cert

pytestmark = pytest.mark.integration

NAME = "s3.via-proxy.test"
SIZES = [64 * 1024, 2 * 1024 * 1024]


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    def run(*argv: object) -> None:
        subprocess.run([str(a) for a in argv], check=True, capture_output=True)

    return make_cert(run, tmp_path_factory.mktemp("tls"), names=(NAME,))


@pytest.fixture
def tls_store(moto_server: str, cert: tuple[Path, Path]) -> Iterator[FaultProxy]:
    """moto's server behind TLS (a certificate for ``NAME``)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*cert)
    p = FaultProxy(moto_server, tls=context, rename_host=True)
    yield p
    p.close()


def via_proxy(scheme: str, moto_server: str, tls_store: FaultProxy) -> tuple[str, ForwardProxy]:
    """The endpoint URL (its host known only to the proxy) and the proxy."""
    port = tls_store.port if scheme == "https" else int(moto_server.rsplit(":", 1)[1])
    proxy = ForwardProxy({f"{NAME}:{port}": ("127.0.0.1", port)})
    return f"{scheme}://{NAME}:{port}", proxy


@pytest.mark.parametrize("case", ["upper", "lower"])
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_an_endpoint_reachable_only_through_the_proxy_works_for_every_block_size(
    bucket: str,
    moto_server: str,
    tls_store: FaultProxy,
    cert: tuple[Path, Path],
    data_path: str,
    scheme: str,
    case: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint, proxy = via_proxy(scheme, moto_server, tls_store)
    variable = f"{scheme.upper()}_PROXY"
    monkeypatch.setenv(variable if case == "upper" else variable.lower(), proxy.url)
    try:
        ca = str(cert[0]) if scheme == "https" else None
        for size in SIZES:
            url = f"s3://{bucket}/kv{size}"
            s = settings(endpoint, data_path, ca_bundle=ca)
            ks, data = keys(3), rows(3, size=size)
            with Uploader(url, NS, settings=s) as up:
                assert up.put_blocks(dict(zip(ks, data))).ok
            out = np.zeros_like(data)
            with Downloader(url, NS, settings=s) as down:
                assert down.get_blocks(ks, into=list(out)).ok
            assert np.array_equal(out, data)
        seen = proxy.methods()
        if scheme == "https":
            assert seen == {"CONNECT"}  # every byte through the tunnel, nothing around it
        else:
            assert {"PUT", "GET"} <= seen and "CONNECT" not in seen
    finally:
        proxy.close()


def test_the_cli_and_the_demo_path_push_and_pull_through_the_proxy(
    bucket: str,
    moto_server: str,
    tls_store: FaultProxy,
    data_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    endpoint, proxy = via_proxy("http", moto_server, tls_store)
    try:
        write_tree(tmp_path / "src", 4, size=2 * 1024 * 1024)
        url = f"s3://{bucket}/cli"
        code, out, err = cli(capsys, "push", str(tmp_path / "src"), url, "--json",
                             endpoint=endpoint, data_path=data_path, HTTP_PROXY=proxy.url)
        assert code == 0 and json.loads(out)["copied"] == 4, err
        code, out, err = cli(capsys, "pull", url, str(tmp_path / "dst"), "--json",
                             endpoint=endpoint, data_path=data_path, HTTP_PROXY=proxy.url)
        assert code == 0 and json.loads(out)["copied"] == 4, err
        assert len(list((tmp_path / "dst").rglob("*.bin"))) == 4
    finally:
        proxy.close()


def test_no_proxy_bypasses_the_proxy(
    bucket: str, moto_server: str, data_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = ForwardProxy({})
    dead.close()  # nothing listens there any more
    monkeypatch.setenv("HTTP_PROXY", dead.url)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    url = f"s3://{bucket}/kv"
    ks, data = keys(2), rows(2, size=2 * 1024 * 1024)
    with Uploader(url, NS, settings=settings(moto_server, data_path)) as up:
        assert up.put_blocks(dict(zip(ks, data))).ok


@pytest.mark.parametrize("command", ["ls", "push", "pull"])
def test_a_dead_proxy_is_a_one_line_error_naming_it(
    bucket: str,
    moto_server: str,
    tls_store: FaultProxy,
    data_path: str,
    command: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    endpoint, proxy = via_proxy("http", moto_server, tls_store)
    proxy.close()  # the proxy is down
    write_tree(tmp_path / "src", 2)
    url = f"s3://{bucket}/kv"
    argv = {"ls": [url], "push": [str(tmp_path / "src"), url],
            "pull": [url, str(tmp_path / "dst")]}[command]
    for extra in ([], ["--json"]):
        code, out, err = cli(capsys, command, *argv, *extra, endpoint=endpoint,
                             data_path=data_path, HTTP_PROXY=proxy.url,
                             S3KV_MAX_ATTEMPTS="2")
        assert code == 5, (out, err)
        assert "Traceback" not in err
        text = out if extra else err
        assert f"127.0.0.1:{proxy.port}" in text and "HTTP_PROXY" in text, text
        if extra:
            doc = json.loads(out)
            assert doc["ok"] is False and doc["error"]["kind"] == "store"
        else:
            assert len(err.strip().splitlines()) == 1, err


def test_a_profiles_ca_bundle_is_trusted(
    bucket: str,
    tls_store: FaultProxy,
    cert: tuple[Path, Path],
    data_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "config"
    config.write_text(
        f"[profile private-ca]\nca_bundle = {cert[0]}\n"
        "aws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    write_tree(tmp_path / "src", 3, size=2 * 1024 * 1024)
    url = f"s3://{bucket}/kv"
    # without it: the CA is unknown, and the error says what to pass
    code, out, err = cli(capsys, "push", str(tmp_path / "src"), url, endpoint=tls_store.url,
                       data_path=data_path, S3KV_MAX_ATTEMPTS="1")
    # the manifest's write fails (exit 1: what failed is reported, with the fix)
    assert code in (1, 5) and "--ca-bundle" in out + err and "Traceback" not in err, (out, err)
    for command, argv in (("push", [str(tmp_path / "src"), url]),
                          ("pull", [url, str(tmp_path / "dst")])):
        code, out, err = cli(capsys, command, *argv, "--json", endpoint=tls_store.url,
                             data_path=data_path, AWS_CONFIG_FILE=str(config),
                             AWS_PROFILE="private-ca")
        assert code == 0 and json.loads(out)["copied"] == 3, err
    s = settings(tls_store.url, data_path)
    with pytest.raises(StoreError, match="TLS"), Uploader(url, NS, settings=s) as up:
        up.put_blocks(dict(zip(keys(1), rows(1))))


@pytest.fixture(scope="module")
def proxy_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The proxy's certificate for IP:127.0.0.1, from a private CA of its own."""

    def run(*argv: object) -> None:
        subprocess.run([str(a) for a in argv], check=True, capture_output=True)

    return make_cert(run, tmp_path_factory.mktemp("proxy-tls"))


@pytest.fixture
def tls_proxy(tls_store: FaultProxy, proxy_cert: tuple[Path, Path]) -> Iterator[ForwardProxy]:
    """A forward proxy that speaks TLS (``https://127.0.0.1:port``), tunnelling to the TLS
    store whose name only it resolves."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*proxy_cert)
    p = ForwardProxy({f"{NAME}:{tls_store.port}": ("127.0.0.1", tls_store.port)}, tls=context)
    yield p
    p.close()


def proxy_trust(source: str, ca: Path, tmp_path: Path) -> dict[str, str]:
    """The environment that trusts ``ca`` for the proxy, from ``source``."""
    if source == "S3KV_PROXY_CA_BUNDLE":
        return {"S3KV_PROXY_CA_BUNDLE": str(ca)}
    config = tmp_path / "config"
    config.write_text(f"[profile behind-proxy]\nproxy_ca_bundle = {ca}\n")
    return {"AWS_CONFIG_FILE": str(config), "AWS_PROFILE": "behind-proxy"}


@pytest.mark.parametrize("source", ["S3KV_PROXY_CA_BUNDLE", "profile"])
def test_an_https_proxy_with_a_private_ca_is_trusted_on_botocores_path(
    bucket: str, tls_store: FaultProxy, tls_proxy: ForwardProxy, cert: tuple[Path, Path],
    proxy_cert: tuple[Path, Path], source: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    endpoint = f"https://{NAME}:{tls_store.port}"
    env = {"HTTPS_PROXY": tls_proxy.url, "S3KV_CA_BUNDLE": str(cert[0])}
    write_tree(tmp_path / "src", 3, size=2 * 1024 * 1024)
    url = f"s3://{bucket}/kv"
    # untrusted: the proxy's handshake fails, and the message says what trusts it
    code, out, err = cli(capsys, "push", str(tmp_path / "src"), url, endpoint=endpoint,
                         data_path="botocore", S3KV_MAX_ATTEMPTS="1", **env)
    assert code == 5 and "S3KV_PROXY_CA_BUNDLE" in err and tls_proxy.url in err, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    deadline = time.monotonic() + 5  # the proxy's side of the handshake ends a bit later
    while not tls_proxy.refused and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tls_proxy.refused and not tls_proxy.seen
    env |= proxy_trust(source, proxy_cert[0], tmp_path)
    for argv in ([str(tmp_path / "src"), url], [url, str(tmp_path / "dst")]):
        command = "push" if argv[0] != url else "pull"
        code, out, err = cli(capsys, command, *argv, "--json", endpoint=endpoint,
                             data_path="botocore", **env)
        assert code == 0 and json.loads(out)["copied"] == 3, (out, err)
    assert tls_proxy.methods() == {"CONNECT"}  # every byte through the trusted tunnel


@pytest.mark.parametrize("source", ["S3KV_PROXY_CA_BUNDLE", "profile"])
def test_awscrts_path_refuses_a_proxy_ca_it_cannot_use(
    bucket: str, tls_store: FaultProxy, tls_proxy: ForwardProxy, cert: tuple[Path, Path],
    proxy_cert: tuple[Path, Path], source: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    endpoint = f"https://{NAME}:{tls_store.port}"
    env = {"HTTPS_PROXY": tls_proxy.url, "S3KV_CA_BUNDLE": str(cert[0]),
           **proxy_trust(source, proxy_cert[0], tmp_path)}  # fmt: skip
    write_tree(tmp_path / "src", 2)
    named = "S3KV_PROXY_CA_BUNDLE" if source == "S3KV_PROXY_CA_BUNDLE" else "proxy_ca_bundle"
    for extra in ([], ["--json"]):
        code, out, err = cli(capsys, "push", str(tmp_path / "src"), f"s3://{bucket}/kv",
                             *extra, endpoint=endpoint, data_path="crt", **env)
        text = out if extra else err
        assert code == 2 and named in text and "S3KV_DATA_PATH=botocore" in text, (out, err)
        assert "Traceback" not in err
        if not extra:
            assert len(err.strip().splitlines()) == 1, err
    assert not tls_proxy.seen and not tls_proxy.refused  # refused before any request
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s = settings(endpoint, "crt", ca_bundle=str(cert[0]))
    with pytest.raises(SettingsError, match="S3KV_DATA_PATH=botocore"):
        Uploader(f"s3://{bucket}/kv", NS, settings=s)
