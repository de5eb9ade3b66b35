"""The Ceph RGW test server starts, serves S3 over HTTP and HTTPS, and stops cleanly.

Needs the Ceph packages (scripts/rgw-install.sh); without them these tests FAIL,
they never skip.
"""

import uuid
from collections.abc import Callable, Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from . import rgw_keep
from .rgw import INSTALL_HINT, RGWServer, RGWStartError, missing_commands, pid_alive

# RGW ignores flexible checksums and answers 411 to boto3's default aws-chunked
# uploads over TLS, so only send checksums when an operation requires one.
S3_CONFIG = Config(
    request_checksum_calculation="when_required",
    response_checksum_validation="when_required",
    s3={"addressing_style": "path"},
    retries={"max_attempts": 2, "mode": "standard"},
)

# Slow by nature, needed: each test starts and stops a Ceph cluster of its own, since
# what is under test is the start and the clean stop the session's server relies on.
pytestmark = pytest.mark.rgw


def require_ceph() -> None:
    """Fail (never skip) when the Ceph packages are missing."""
    missing = missing_commands()
    if missing:
        pytest.fail(f"Ceph RGW tests: missing commands {missing}; {INSTALL_HINT}", pytrace=False)


@pytest.fixture
def new_rgw(request: pytest.FixtureRequest) -> Iterator[Callable[..., RGWServer]]:
    """RGWServer(**kw) whose directory is removed after the test, or kept if it failed."""
    servers: list[RGWServer] = []

    def make(**kw: object) -> RGWServer:
        server = RGWServer(**kw)
        servers.append(server)
        rgw_keep.track(request.node, server)
        return server

    yield make
    for server in servers:
        rgw_keep.finish(server, keep=rgw_keep.failed(request.node))


def s3_client(rgw: RGWServer, endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        verify=rgw.ca_bundle if endpoint.startswith("https:") else None,
        region_name=rgw.region,
        aws_access_key_id=rgw.access_key,
        aws_secret_access_key=rgw.secret_key,
        config=S3_CONFIG,
    )


def exercise(s3, bucket: str) -> None:
    s3.create_bucket(Bucket=bucket)
    body = uuid.uuid4().bytes * 4096  # 64 KiB
    s3.put_object(Bucket=bucket, Key="k/1", Body=body, Metadata={"s3kv-test": "yes"})
    got = s3.get_object(Bucket=bucket, Key="k/1")
    assert got["Body"].read() == body
    assert got["Metadata"] == {"s3kv-test": "yes"}
    assert (
        s3.get_object(Bucket=bucket, Key="k/1", Range="bytes=16-31")["Body"].read() == body[16:32]
    )
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="k/")["Contents"]] == ["k/1"]

    s3.put_object(Bucket=bucket, Key="once", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket=bucket, Key="once", Body=b"second", IfNoneMatch="*")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.get_object(Bucket=bucket, Key="once")["Body"].read() == b"first"

    with pytest.raises(ClientError) as err:
        s3.head_object(Bucket=bucket, Key="missing")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_rgw_server_http_https_and_clean_stop(new_rgw):
    require_ceph()
    rgw = new_rgw()
    try:
        rgw.start()
        assert set(rgw.pids) == {"mon", "osd", "radosgw"}
        assert all(pid_alive(p) for p in rgw.pids.values())
        assert rgw.http_endpoint.startswith("http://127.0.0.1:")
        assert rgw.https_endpoint.startswith("https://127.0.0.1:")
        exercise(s3_client(rgw, rgw.http_endpoint), "plain")
        exercise(s3_client(rgw, rgw.https_endpoint), "tls")
        # One store behind both endpoints.
        assert {"plain", "tls"} <= {
            b["Name"] for b in s3_client(rgw, rgw.https_endpoint).list_buckets()["Buckets"]
        }
    finally:
        log_dir = rgw.stop()
    survivors = {n: p for n, p in rgw.spawned_pids.items() if pid_alive(p)}
    assert not survivors, f"daemons still running after stop(): {survivors}"
    assert rgw.pids == {}
    assert log_dir is not None and (log_dir / "ceph-client.rgw.a.log").exists()
    assert not rgw.data_dir.exists(), "data directory not removed"
    rgw.stop()  # idempotent


def test_rgw_server_failed_start_stops_every_daemon(new_rgw):
    """A start that fails after the daemons are up (TLS key missing) leaves nothing running."""
    require_ceph()
    rgw = new_rgw(start_timeout=60)
    make_cert = rgw._make_cert

    def broken_cert():
        make_cert()
        rgw._key_pem = rgw.tls_dir / "no-such-key.pem"

    rgw._make_cert = broken_cert
    with pytest.raises(RGWStartError) as err:
        rgw.start()
    assert str(rgw.log_dir) in str(err.value)  # the error points at the logs
    assert set(rgw.spawned_pids) == {"mon", "osd", "radosgw"}
    survivors = {n: p for n, p in rgw.spawned_pids.items() if pid_alive(p)}
    assert not survivors, f"daemons still running after a failed start: {survivors}"
    assert not rgw.data_dir.exists()
