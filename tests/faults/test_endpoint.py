"""One endpoint for every request, and no secret in any message (issue 19, points 9 and
13; issue 20, point 2): a profile's endpoint_url, a services section and an endpoint
URL with a path reach exactly that endpoint on both data paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from s3kv import S3Settings, SettingsError, Uploader
from s3kv.settings import display_url
from s3kv.stores.errors import short
from tests.faults.conftest import NS, cli, keys, rows, seed_blocks, settings, write_tree

pytestmark = pytest.mark.integration


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aws-config"
    path.write_text(text)
    return path


# A named profile takes its credentials from the file, not from the environment.
PROFILE = (
    "[profile fromfile]\nregion = us-east-1\naws_access_key_id = testing\n"
    "aws_secret_access_key = testing\n"
)


def profile_with_endpoint(tmp_path: Path, url: str) -> Path:
    return config_file(tmp_path, f"{PROFILE}endpoint_url = {url}\n")


def profile_with_services(tmp_path: Path, url: str) -> Path:
    # The profile's own endpoint_url is a dead port: the services section must win for S3.
    return config_file(
        tmp_path,
        f"{PROFILE}endpoint_url = http://127.0.0.1:9\nservices = local\n\n"
        f"[services local]\ns3 =\n  endpoint_url = {url}\n",
    )


@pytest.mark.parametrize("where", ["profile", "services"])
def test_every_request_reaches_the_profile_endpoint(
    proxy: Any,
    bucket: str,
    moto_server: str,
    data_path: str,
    where: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = proxy()
    make = profile_with_endpoint if where == "profile" else profile_with_services
    monkeypatch.setenv("AWS_CONFIG_FILE", str(make(tmp_path, p.url)))
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("S3KV_TRACE_FILE", str(trace))
    url = f"s3://{bucket}/kv"
    write_tree(tmp_path / "src", 3)
    runs = [
        ("push", str(tmp_path / "src"), url),
        ("pull", url, str(tmp_path / "dst")),
        ("verify", url, "--deep"),
        ("ls", url),
        ("gc", url, "--older-than", "0s", "--dry-run"),
    ]
    for argv in runs:
        code, out, err = cli(capsys, *argv, "--profile", "fromfile", endpoint=None,
                             data_path=data_path)
        # today on awscrt: block PUTs go to s3.us-east-1.amazonaws.com, exit 5
        assert code == 0, (argv, out, err)
    with Uploader(url, NS, settings=S3Settings.resolve(profile="fromfile",
                                                       data_path=data_path)) as up:
        assert up.put_blocks(dict(zip(keys(2), rows(2)))).ok
    sent = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {r.host for r in p.requests} == {f"127.0.0.1:{p.port}"}
    assert len(p.requests) == len(sent)  # every request s3kv made went there, no other
    assert {"PutObject", "GetObject", "ListObjectsV2"} <= {r["op"] for r in sent}


def test_an_endpoint_with_a_path_is_used_on_both_paths(
    proxy: Any,
    bucket: str,
    moto_server: str,
    data_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A gateway mounted under /gw: every request must carry the path.
    p = proxy(strip_prefix="/gw")
    assert p.url.endswith("/gw")
    url = f"s3://{bucket}/kv"
    ks = keys(3)
    with Uploader(url, NS, settings=settings(p.url, data_path)) as up:
        assert up.put_blocks(dict(zip(ks, rows(3)))).ok
    write_tree(tmp_path / "src", 2)
    for argv in (
        ("push", str(tmp_path / "src"), url),
        ("pull", url, str(tmp_path / "dst")),
        ("verify", url, "--deep"),
    ):
        code, out, err = cli(capsys, *argv, endpoint=p.url, data_path=data_path)
        assert code == 0, (argv, out, err)
    assert not p.stray  # today on awscrt: block requests without /gw
    assert len(list((tmp_path / "dst").rglob("*.bin"))) == 5
    assert p.seen("PUT", blocks=True) and p.seen("GET", blocks=True)


SECRET_URLS = [
    "http://127.0.0.1:9000/?X-Amz-Signature=s3cr3tsig&X-Amz-Credential=AKIDSECRET",
    "http://127.0.0.1:9000/gw#s3cr3tsig",
    "http://AKIDSECRET:s3cr3tsig@127.0.0.1:9000",
    "http://AKIDSECRET%40corp:s3cr3tsig%3Ax@127.0.0.1:9000",
    "http://AKIDSECRET%40corp:s3cr3tsig%40127.0.0.1",
    "http://127.0.0.1:s3cr3tsig",
]


def no_secret(text: str) -> bool:
    return "s3cr3tsig" not in text and "AKIDSECRET" not in text


@pytest.mark.parametrize("url", SECRET_URLS)
def test_refusals_never_repeat_secrets_of_an_endpoint_url(
    url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(SettingsError) as caught:
        S3Settings.resolve(env={}, endpoint_url=url)
    assert no_secret(str(caught.value)), caught.value
    # the flag, the environment and a profile alike
    code, out, err = cli(capsys, "ls", "s3://bkt/kv", "--endpoint-url", url, endpoint=None,
                         data_path="crt")
    assert code == 2 and no_secret(out + err), err
    code, out, err = cli(capsys, "ls", "s3://bkt/kv", endpoint=None, data_path="crt",
                         AWS_ENDPOINT_URL=url)
    assert code == 2 and no_secret(out + err), err
    monkeypatch.setenv("AWS_CONFIG_FILE", str(profile_with_endpoint(tmp_path, url)))
    code, out, err = cli(capsys, "ls", "s3://bkt/kv", "--profile", "fromfile", endpoint=None,
                         data_path="crt")
    # today: botocore takes it (or says why, showing it) and awscrt ignores it
    assert code == 2 and "endpoint_url" in err and no_secret(out + err), err
    assert "Traceback" not in err


def test_no_message_repeats_a_query(
    bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.conftest import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    code, _out, err = cli(capsys, "ls", f"s3://{bucket}/kv", endpoint=dead, data_path="crt",
                         S3KV_MAX_ATTEMPTS="1")
    assert code == 5 and f"127.0.0.1:{dead.rsplit(':', 1)[1]}" in err
    assert "?" not in err and "list-type" not in err  # botocore's own text shows the query
    assert display_url("http://u:p@h:1/gw?q=1#f") == "http://h:1/gw"
    assert no_secret(short(ValueError(f"Invalid endpoint: {SECRET_URLS[0]}")))


def test_seeded_blocks_are_readable_through_a_profile(
    proxy: Any,
    bucket: str,
    moto_server: str,
    data_path: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from s3kv import Downloader

    url = f"s3://{bucket}/kv"
    ks = seed_blocks(url, moto_server, 2)
    p = proxy()
    monkeypatch.setenv("AWS_CONFIG_FILE", str(profile_with_services(tmp_path, p.url)))
    s = S3Settings.resolve(profile="fromfile", data_path=data_path)
    assert s.endpoint_url is None  # resolved by boto3 from the file, not by s3kv's env
    with Downloader(url, NS, settings=s) as down:
        assert down.contains(ks) == [True, True]
        assert down.get_blocks(ks).ok
    # the looks (a GET of one byte) and the loads both went through the profile's endpoint
    looks = [r for r in p.seen("GET", blocks=True) if r.header("range") == "bytes=0-0"]
    assert looks and len(p.seen("GET", blocks=True)) > len(looks)
