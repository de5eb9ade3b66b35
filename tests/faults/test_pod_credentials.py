"""Issue 29, point 7: the credentials a pod gets on EKS reach every request, and renew.

docs/kubernetes.md says s3kv needs no keys on Kubernetes: EKS Pod Identity and IRSA hand
a pod short-lived credentials through boto3's standard chain, and every data path
(botocore, awscrt, s3kv's direct path for blocks of 1 MiB and more) signs with them and
picks up renewed ones. Here, on the wire:

* Pod Identity: an agent of our own on 127.0.0.1 (the protocol of EKS's: a GET with the
  pod's token, credentials with an expiry as JSON) hands out credentials that expire
  within minutes, each time under another access key id, through
  ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` and ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``;
* IRSA: ``AWS_ROLE_ARN`` and ``AWS_WEB_IDENTITY_TOKEN_FILE``, with moto's STS answering
  ``AssumeRoleWithWebIdentity``.

A recording proxy in front of moto's S3 shows which access key id signed each request.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from s3kv import Downloader, Namespace, S3Settings, Uploader, make_offload_key
from tests.faults.proxy import FaultProxy

pytestmark = pytest.mark.integration

NS = Namespace(model_name="k8s/model", tokens_per_hash=16, dtype="bfloat16")
SMALL, LARGE = 64 * 1024, 2 << 20  # awscrt's path, and s3kv's direct path (>= 1 MiB)
KEY_ID = re.compile(r"Credential=([A-Z0-9]+)/")


class Agent:
    """An EKS Pod Identity agent: each GET with the pod's token answers new credentials
    that expire in ``lifetime`` (inside botocore's refresh window: renewed on use)."""

    def __init__(self, token: str, lifetime: timedelta) -> None:
        self.token, self.lifetime = token, lifetime
        self.calls: list[str | None] = []
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                agent.calls.append(self.headers.get("Authorization"))
                expires = datetime.now(timezone.utc) + agent.lifetime
                body = json.dumps({
                    "AccessKeyId": f"ASIAPOD{len(agent.calls):06d}",
                    "SecretAccessKey": "pod-secret", "Token": "pod-session-token",
                    "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/credentials"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod's environment: no keys, no profile (the suite sets test keys by default)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def proxy(moto_server: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server) as recording:
        yield recording


def store_and_load(url: str, settings: S3Settings) -> None:
    rows = {make_offload_key(bytes([i]) * 32, 0): bytes([i]) * size
            for i, size in ((1, SMALL), (2, SMALL), (3, LARGE))}  # fmt: skip
    with Uploader(url, NS, settings=settings) as up:
        assert up.put_blocks(rows).ok
    with Downloader(url, NS, settings=settings) as down:
        into = [bytearray(len(v)) for v in rows.values()]
        assert down.get_blocks(list(rows), into=into).ok
    assert [bytes(b) for b in into] == list(rows.values())


def signers(proxy: FaultProxy, *, method: str | None = None, size: int | None = None) -> list[str]:
    """The access key id of each S3 request seen (of a PUT of ``size`` bytes)."""
    return [
        KEY_ID.search(r.header("authorization") or "").group(1)  # type: ignore[union-attr]
        for r in proxy.seen(method)
        if r.header("authorization") and (size is None or r.header("content-length") == str(size))
    ]


def test_pod_identity_credentials_sign_every_path_and_renew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_keys: None, proxy: FaultProxy,
    moto_server: str,
) -> None:  # fmt: skip
    token = tmp_path / "eks-pod-identity-token"
    token.write_text("a-service-account-token")
    agent = Agent("a-service-account-token", lifetime=timedelta(minutes=5))
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", agent.url)
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token))
    try:
        from tests.conftest import _s3_client

        _s3_client(moto_server).create_bucket(Bucket="s3kv-pod-identity")
        settings = S3Settings.resolve(endpoint_url=proxy.url)
        store_and_load("s3://s3kv-pod-identity/kv", settings)
    finally:
        agent.close()
    assert len(agent.calls) >= 2 and set(agent.calls) == {"a-service-account-token"}
    every = signers(proxy)
    assert every and all(k.startswith("ASIAPOD") for k in every)
    assert len(set(every)) >= 2  # renewed credentials reached the requests
    for size in (SMALL, LARGE):  # awscrt's PUTs and the direct path's
        assert all(k.startswith("ASIAPOD") for k in signers(proxy, method="PUT", size=size))
        assert signers(proxy, method="PUT", size=size), size


def test_irsa_web_identity_credentials_sign_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_keys: None, proxy: FaultProxy,
    moto_server: str,
) -> None:  # fmt: skip
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2ln")
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/s3kv-writer")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", proxy.url)  # moto's STS, through the proxy
    from tests.conftest import _s3_client

    _s3_client(moto_server).create_bucket(Bucket="s3kv-irsa")
    store_and_load("s3://s3kv-irsa/kv", S3Settings.resolve(endpoint_url=proxy.url))
    assumed = [r for r in proxy.seen("POST") if b"AssumeRoleWithWebIdentity" in r.body]
    assert assumed and b"s3kv-writer" in assumed[0].body
    s3_signers = [k for r in proxy.seen() if b"AssumeRole" not in r.body
                  for k in KEY_ID.findall(r.header("authorization") or "")]  # fmt: skip
    assert s3_signers and all(k.startswith("ASIA") for k in s3_signers)
    assert not any(k == "testing" for k in s3_signers)  # not the suite's keys
    for size in (SMALL, LARGE):
        assert signers(proxy, method="PUT", size=size), size
