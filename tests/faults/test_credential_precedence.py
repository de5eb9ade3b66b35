"""Issue 38, point 7: whose keys sign a request is what botocore decides, on both paths.

botocore's chain (``botocore.credentials.create_credential_resolver``) starts with the
environment's keys (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``), then the profile's.
A profile named by ``AWS_PROFILE`` is only the default profile: with keys in the
environment those sign, whether the profile has keys or none. A profile named explicitly
(boto3's ``profile_name``; s3kv's ``--profile``, ``S3KV_PROFILE``) takes the environment's
keys out of the chain: its own keys sign, and a profile without keys finds none.

A recording proxy in front of moto's server shows the access key id of every request:
the manifest's and the listing's (boto3) and the blocks' (awscrt by default, or boto3).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.conftest import cli, write_tree
from tests.faults.proxy import FaultProxy

pytestmark = pytest.mark.integration

ENV_KEY, PROFILE_KEY = "AKIAENVIRONMENT00001", "AKIAPROFILE000000001"
KEY_ID = re.compile(r"Credential=([A-Z0-9]+)/")


@pytest.fixture
def recording(moto_server: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server) as proxy:
        yield proxy


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """Two profiles: ``regional`` without keys, ``keyed`` with its own."""
    path = tmp_path / "aws-config"
    path.write_text(
        "[profile regional]\nregion = us-east-1\n"
        f"[profile keyed]\naws_access_key_id = {PROFILE_KEY}\n"
        "aws_secret_access_key = profile-secret\n"
    )
    return path


@pytest.fixture
def environment_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ENV_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "environment-secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)


def signers(proxy: FaultProxy) -> set[str]:
    """The access key ids that signed what the proxy saw (one per request: all signed)."""
    found = [KEY_ID.search(r.header("authorization") or "") for r in proxy.seen()]
    assert found and all(found), "a request went unsigned"
    return {m.group(1) for m in found if m}


def push_and_pull(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, url: str, proxy: FaultProxy,
    data_path: str, *flags: str, **env: str,
) -> None:  # fmt: skip
    write_tree(tmp_path / "src", 3)
    for argv in (["push", str(tmp_path / "src"), url], ["pull", url, str(tmp_path / "dst")]):
        code, out, err = cli(capsys, *argv, *flags, "--json", endpoint=proxy.url,
                             data_path=data_path, **env)
        assert code == 0 and json.loads(out)["copied"] == 3, (out, err)
    assert proxy.seen(blocks=True), "no block went through the proxy"


@pytest.mark.parametrize("profile", ["regional", "keyed"])
def test_aws_profile_gives_way_to_the_environments_keys(
    bucket: str, recording: FaultProxy, config: Path, environment_keys: None, data_path: str,
    profile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # before: AWS_PROFILE was passed to boto3 as an explicit profile, so the environment's
    # keys were never looked at: "no AWS credentials found" (regional), the profile's
    # keys signing (keyed)
    push_and_pull(capsys, tmp_path, f"s3://{bucket}/kv", recording, data_path,
                  AWS_CONFIG_FILE=str(config), AWS_PROFILE=profile)
    assert signers(recording) == {ENV_KEY}


@pytest.mark.parametrize("how", ["--profile", "S3KV_PROFILE"])
def test_an_explicit_profile_signs_with_its_own_keys(
    bucket: str, recording: FaultProxy, config: Path, environment_keys: None, data_path: str,
    how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    flags = ["--profile", "keyed"] if how == "--profile" else []
    env = {"S3KV_PROFILE": "keyed"} if how == "S3KV_PROFILE" else {}
    push_and_pull(capsys, tmp_path, f"s3://{bucket}/kv", recording, data_path, *flags,
                  AWS_CONFIG_FILE=str(config), **env)
    assert signers(recording) == {PROFILE_KEY}


def test_an_explicit_profile_without_keys_finds_none(
    bucket: str, recording: FaultProxy, config: Path, environment_keys: None, data_path: str,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    write_tree(tmp_path / "src", 1)
    code, out, err = cli(capsys, "push", str(tmp_path / "src"), f"s3://{bucket}/kv",
                         "--profile", "regional", endpoint=recording.url,
                         data_path=data_path, AWS_CONFIG_FILE=str(config))
    assert code == 4 and "no AWS credentials found" in err, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not recording.seen()  # nothing unsigned went out
