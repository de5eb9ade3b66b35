"""A key per tenant on the wire: every request to a tenant's object carries that tenant's
SSE-C key, on both data paths, and an object answers no byte to another key or none.

Two stores: moto's server behind :class:`CustomerKeys` (the proxy records every request's
headers and refuses a GET with another key, as a store does: moto itself keeps no key)
and Ceph RGW 16 over TLS, which encrypts for real and refuses by itself.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

from s3kv import (
    AccessDeniedError,
    CustomerKeyError,
    Downloader,
    S3Settings,
    SettingsError,
    Uploader,
)
from s3kv.naming.location import parse_location
from s3kv.tenant_keys import derive_key
from tests.conftest import _bucket_name, _s3_client
from tests.faults.conftest import BLOCK, NS, keys, rows, settings
from tests.faults.proxy import CustomerKeys, FaultProxy

SECRET = b"correct horse battery staple, and thirty-two bytes"
OTHER_SECRET = b"another secret, the one after a rotation of secrets"
KEY_HEADER = "x-amz-server-side-encryption-customer-key"


@dataclass
class World:
    name: str
    endpoint: str
    bucket: str
    client: Any
    """A plain boto3 client (behind s3kv's back)."""
    options: dict[str, Any]
    proxy: FaultProxy | None = None
    rule: CustomerKeys | None = None


@pytest.fixture(params=["moto-server", "rgw-https"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    if request.param == "moto-server":
        moto = request.getfixturevalue("moto_server")
        rule = CustomerKeys()
        with FaultProxy(moto, rule) as proxy:
            bucket = _bucket_name()
            client = _s3_client(moto)
            client.create_bucket(Bucket=bucket)
            yield World("moto-server", proxy.url, bucket, client, {}, proxy, rule)
        return
    rgw = request.getfixturevalue("rgw")  # SSE-C needs TLS on RGW
    client = _s3_client(rgw.https_endpoint, verify=rgw.ca_bundle,
                        credentials=(rgw.access_key, rgw.secret_key))
    bucket = _bucket_name()
    client.create_bucket(Bucket=bucket)
    yield World("rgw-https", rgw.https_endpoint, bucket, client, {
        "ca_bundle": rgw.ca_bundle, "access_key_id": rgw.access_key,
        "secret_access_key": rgw.secret_key})


def _secret_file(tmp_path: Path, secret: bytes, name: str = "secret") -> Path:
    path = tmp_path / name
    path.write_bytes(base64.b64encode(secret) + b"\n")
    return path


def _settings(world: World, data_path: str, secret: Path | None) -> S3Settings:
    return settings(world.endpoint, data_path, sse_c_secret_file=secret, **world.options)


def _md5(secret_file: Path, tenant: str) -> str:
    key = derive_key(secret_file.read_bytes().strip(), tenant)
    return base64.b64encode(hashlib.md5(key).digest()).decode()


def test_each_tenant_is_written_and_read_with_its_own_key(
    world: World, data_path: str, tmp_path: Path
) -> None:
    secret = _secret_file(tmp_path, SECRET)
    s = _settings(world, data_path, secret)
    base = parse_location(f"s3://{world.bucket}/team/kv")
    ks, data = keys(3), rows(3)
    for tenant, seed in (("acme", 1), ("globex", 2)):
        with Uploader(base.for_tenant(tenant), NS, settings=s) as up:
            assert len(up.put_blocks(dict(zip(ks, rows(3, seed)))).done) == 3
    for tenant, seed in (("acme", 1), ("globex", 2)):  # the same keys, each its own bytes
        out = np.zeros_like(data)
        with Downloader(base.for_tenant(tenant), NS, settings=s) as down:
            assert down.contains(ks) == [True] * 3
            assert len(down.get_blocks(ks, into=list(out)).done) == 3
        assert np.array_equal(out, rows(3, seed))
    listed = world.client.list_objects_v2(Bucket=world.bucket)["Contents"]
    assert {o["Key"].split("/")[3] for o in listed} == {"acme", "globex"}
    assert all(o["Key"].startswith(("team/kv/tenants/acme/", "team/kv/tenants/globex/"))
               for o in listed)
    if world.rule is not None:  # what went on the wire, request by request
        assert world.proxy is not None
        sent = [r for r in world.proxy.requests if r.method in ("GET", "PUT")
                and not r.is_listing]
        assert sent and world.rule.refused == []
        for r in sent:
            tenant = r.path.split("/")[5]
            assert r.header(CustomerKeys.HEADER) == _md5(secret, tenant), r.path
            key = derive_key(secret.read_bytes().strip(), tenant)
            assert r.header(KEY_HEADER) == base64.b64encode(key).decode()
        assert _md5(secret, "acme") != _md5(secret, "globex")
    else:  # encrypted at rest: Ceph serves no byte without the tenant's own key
        block = next(o["Key"] for o in listed if o["Key"].endswith(".bin"))
        for sse in ({}, {"SSECustomerAlgorithm": "AES256",
                         "SSECustomerKey": derive_key(SECRET, "globex")}):
            with pytest.raises(ClientError) as info:
                world.client.get_object(Bucket=world.bucket, Key=block, **sse)
            assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_a_wrong_key_or_none_serves_no_byte(world: World, data_path: str, tmp_path: Path) -> None:
    loc = parse_location(f"s3://{world.bucket}/team/kv").for_tenant("acme")
    ks = keys(2)
    writing = _settings(world, data_path, _secret_file(tmp_path, SECRET))
    with Uploader(loc, NS, settings=writing) as up:
        up.put_blocks(dict(zip(ks, rows(2))))
    other = _secret_file(tmp_path, OTHER_SECRET, "rotated")
    for secret in (other, None):
        with (Downloader(loc, NS, settings=_settings(world, data_path, secret)) as down,
              pytest.raises(CustomerKeyError)):  # the manifest is the tenant's too
            down.get_blocks(ks, into=list(np.zeros((2, BLOCK), dtype=np.uint8)))
    manifest = f"{loc.prefix}/{NS.folder}/config.json"
    world.client.delete_object(Bucket=world.bucket, Key=manifest)  # to reach the blocks
    if world.rule is not None:
        world.rule.written.pop(f"/{world.bucket}/{manifest}")
    for secret in (other, None):
        s = _settings(world, data_path, secret)
        with Downloader(loc, NS, settings=s, require_manifest=False) as down:
            out = np.full((2, BLOCK), 0x55, dtype=np.uint8)
            report = down.get_blocks(ks, into=list(out))
            assert set(report.failed) == set(ks)
            assert all("customer key (SSE-C)" in why for why in report.failed.values())
            assert not out.any()  # zeroed: nothing of the object, nothing of before
            with pytest.raises(CustomerKeyError, match="another tenant's object, one written "
                               "before the secret was rotated") as info:
                down.contains(ks)
            assert isinstance(info.value, AccessDeniedError)


def test_objects_outside_every_tenant_carry_no_key(
    world: World, data_path: str, tmp_path: Path
) -> None:
    s = _settings(world, data_path, _secret_file(tmp_path, SECRET))
    loc = parse_location(f"s3://{world.bucket}/team/kv")
    ks = keys(2)
    with Uploader(loc, NS, settings=s) as up:
        up.put_blocks(dict(zip(ks, rows(2))))
    block = next(o["Key"] for o in world.client.list_objects_v2(Bucket=world.bucket)["Contents"]
                 if o["Key"].endswith(".bin"))
    got = world.client.get_object(Bucket=world.bucket, Key=block)["Body"].read()
    assert len(got) == BLOCK
    if world.proxy is not None:
        assert all(r.header(CustomerKeys.HEADER) is None for r in world.proxy.requests)


def test_the_secret_file_is_checked_and_never_shown(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"'/nowhere/secret': No such file"):
        S3Settings.resolve(sse_c_secret_file="/nowhere/secret")
    short = tmp_path / "short"
    short.write_bytes(b"hunter2-hunter2\n")
    with pytest.raises(SettingsError, match="holds 15 bytes; a secret needs at least 32") as info:
        S3Settings.resolve(sse_c_secret_file=str(short))
    assert "hunter2" not in str(info.value)
    good = _secret_file(tmp_path, SECRET)
    s = S3Settings.resolve(sse_c_secret_file=str(good))
    shown = repr(s) + str(s.model_dump())
    assert good.read_text().strip() not in shown and "horse" not in shown


def test_large_blocks_and_renewals_carry_the_tenants_key(
    world: World, data_path: str, tmp_path: Path
) -> None:
    """A multipart upload (a block over the threshold) and a renewal (a copy of a block
    onto itself, with the key as source and as destination) keep the tenant's key: the
    block reads back with it. Ceph RGW 16 answers any copy of an SSE-C object 501: the
    store says so as NotImplementedError, which turns renewal off (s3kv.ops.gc.renewal)."""
    from datetime import timedelta

    from s3kv.stores import open_store

    secret = _secret_file(tmp_path, SECRET)
    s = _settings(world, data_path, secret).model_copy(update={
        "multipart_threshold_bytes": 5 << 20, "multipart_chunk_bytes": 5 << 20})
    loc = parse_location(f"s3://{world.bucket}/team/kv").for_tenant("acme")
    ks, big = keys(1), rows(1, size=6 << 20)
    with Uploader(loc, NS, settings=s) as up:
        assert len(up.put_blocks(dict(zip(ks, big))).done) == 1
        key = up.keys.key_for(ks[0])
    out = np.zeros_like(big)
    with Downloader(loc, NS, settings=s) as down:
        assert len(down.get_blocks(ks, into=list(out)).done) == 1
    assert np.array_equal(out, big)
    store = open_store(loc, s)
    try:
        details = store.describe(key)
        assert details is not None and details.info.last_modified is not None
        later = details.info.last_modified + timedelta(seconds=1)
        if world.rule is None:  # Ceph RGW 16
            with pytest.raises(NotImplementedError, match=r"customer key \(SSE-C\)"):
                store.renew(key, unmodified_since=later, metadata=details.metadata)
            return
        assert store.renew(key, unmodified_since=later, metadata=details.metadata)
    finally:
        store.close()
    assert world.proxy is not None
    copy = [r for r in world.proxy.requests if r.header("x-amz-copy-source")]
    md5 = _md5(secret, "acme")
    assert copy and all(r.header(CustomerKeys.HEADER) == md5 and r.header(
        "x-amz-copy-source-server-side-encryption-customer-key-MD5") == md5 for r in copy)
    parts = [r for r in world.proxy.requests if "partNumber=" in r.query or "uploads" in r.query]
    assert parts and all(r.header(CustomerKeys.HEADER) == md5 for r in parts)
