"""S3Settings: arguments, then S3KV_*, then AWS_*, then defaults; clear errors; no secrets."""

from __future__ import annotations

import pytest

from s3kv import S3Settings, SettingsError
from s3kv.naming.location import parse_location

pytestmark = pytest.mark.unit


def test_precedence_arguments_then_s3kv_then_aws() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://aws-env:1",
        "S3KV_ENDPOINT_URL": "http://s3kv-env:2",
        "AWS_REGION": "eu-west-1",
        "S3KV_CONCURRENCY": "12",
    }
    s = S3Settings.resolve(env)
    assert (s.endpoint_url, s.region, s.concurrency) == ("http://s3kv-env:2", "eu-west-1", 12)
    s = S3Settings.resolve(env, endpoint_url="http://arg:3", concurrency=4)
    assert (s.endpoint_url, s.concurrency) == ("http://arg:3", 4)
    assert S3Settings.resolve({}).concurrency == 32


def test_aws_profile_stays_boto3s_default_and_s3kv_profile_is_explicit() -> None:
    # botocore lets the environment's keys win over AWS_PROFILE, never over an explicit
    # profile: copying AWS_PROFILE into ``profile`` would make it explicit
    # (tests/faults/test_credential_precedence.py shows whose keys sign)
    assert S3Settings.resolve({"AWS_PROFILE": "team"}).profile is None
    assert S3Settings.resolve({"AWS_PROFILE": "team", "S3KV_PROFILE": "s3kv"}).profile == "s3kv"
    assert S3Settings.resolve({"AWS_PROFILE": "team"}, profile="flag").profile == "flag"


def test_custom_endpoints_default_to_path_style() -> None:
    assert S3Settings.resolve({}).resolved_addressing_style == "auto"
    s = S3Settings.resolve({}, endpoint_url="http://minio:9000")
    assert s.resolved_addressing_style == "path"
    assert S3Settings.resolve({"S3KV_PATH_STYLE": "true"}).addressing_style == "path"
    with pytest.raises(SettingsError, match="S3KV_PATH_STYLE"):
        S3Settings.resolve({"S3KV_PATH_STYLE": "maybe"})


def test_defaults_work_on_every_store() -> None:
    s = S3Settings.resolve({})
    # boto3's own checksums only when required: Ceph RGW over TLS rejects its default.
    assert s.checksum_calculation == "when_required" and s.checksum == "crc32c"


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"S3KV_CONCURRENCY": "lots"}, r"concurrency='lots' \(from \$S3KV_CONCURRENCY\)"),
        ({"S3KV_CONCURRENCY": "0"}, "concurrency"),
        ({"S3KV_CHECKSUM": "md5"}, "checksum"),
        ({"S3KV_ENDPOINT_URL": "minio:9000"}, "http:// or https://"),
        ({"S3KV_CA_BUNDLE": "/nonexistent/ca.pem"}, "not a readable file"),
        (
            {"S3KV_PROXY_CA_BUNDLE": "/nonexistent/ca.pem"},
            r"proxy_ca_bundle='/nonexistent/ca.pem' \(from \$S3KV_PROXY_CA_BUNDLE\): not a",
        ),
        ({"S3KV_ACCESS_KEY_ID": "AKIA"}, "both access_key_id and secret_access_key"),
    ],
)
def test_bad_values_name_the_setting_and_its_source(env: dict[str, str], match: str) -> None:
    with pytest.raises(SettingsError, match=match) as info:
        S3Settings.resolve(env)
    assert isinstance(info.value, ValueError)


def test_secrets_never_shown() -> None:
    s = S3Settings.resolve({}, access_key_id="AKIAX", secret_access_key="hunter2-secret")
    assert "hunter2-secret" not in repr(s) and "hunter2-secret" not in str(s)
    with pytest.raises(SettingsError) as info:
        S3Settings.resolve({}, secret_access_key="hunter2-secret", concurrency=-1)
    assert "hunter2-secret" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "bucket", "prefix"),
    [
        ("s3://bkt", "bkt", ""),
        ("s3://bkt/", "bkt", ""),
        ("s3://bkt/team/kv/", "bkt", "team/kv"),
        ("S3://bkt/kv", "bkt", "kv"),
    ],
)
def test_locations(text: str, bucket: str, prefix: str) -> None:
    loc = parse_location(text)
    assert (loc.bucket, loc.prefix) == (bucket, prefix)


@pytest.mark.parametrize("text", ["s3://", "s3://b", "s3://bkt/a//b", "gs://bkt/x", ""])
def test_bad_locations(text: str) -> None:
    from s3kv import InvalidLocationError

    with pytest.raises(InvalidLocationError):
        parse_location(text)


def test_directory_location(tmp_path) -> None:  # type: ignore[no-untyped-def]
    loc = parse_location(str(tmp_path))
    assert loc.bucket is None and loc.path == tmp_path
