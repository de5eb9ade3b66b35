"""Issue 39, point 5: ``--tenant`` and ``--sse-c-secret-file`` on the command line.

Every command acts on a tenant's part of a location (``<prefix>/tenants/<tenant>``);
``s3kv ls`` lists a location's tenants with their bytes; ``s3kv rm --tenant`` forgets
one. moto's server sits behind :class:`CustomerKeys`, which refuses a GET with another
customer key (or none) as a store does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from s3kv.cli.jsondoc import schema
from tests.cli.day_two import bucket, cli, keys_in, namespace, s3, write_tree
from tests.faults.proxy import CustomerKeys, FaultProxy

pytestmark = pytest.mark.integration
__all__ = ["bucket", "s3"]  # fixtures used by name

NS = namespace("org/tenant-model")


@pytest.fixture
def keeper(moto_server: str) -> Iterator[tuple[str, CustomerKeys]]:
    rule = CustomerKeys()
    with FaultProxy(moto_server, rule) as proxy:
        yield proxy.url, rule


@pytest.fixture
def secret(tmp_path: Path) -> str:
    path = tmp_path / "sse-c.secret"
    path.write_text("c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldC1zZWNyZXQ=\n")
    return str(path)


def test_each_command_acts_on_the_tenants_part(
    capsys: Any, tmp_path: Path, keeper: tuple[str, CustomerKeys], bucket: str, s3: Any,
    secret: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    endpoint, rule = keeper
    url, conn = f"s3://{bucket}/kv", ("--endpoint-url", endpoint, "--sse-c-secret-file", secret)
    src = tmp_path / "src"
    write_tree(src, NS, 3)
    for tenant in ("acme", "globex"):
        assert cli(capsys, "push", str(src), url, "--tenant", tenant, *conn).code == 0
    keys = keys_in(s3, bucket)
    assert {k.split("/")[2] for k in keys} == {"acme", "globex"}
    assert all(k.startswith(("kv/tenants/acme/", "kv/tenants/globex/")) for k in keys)

    listed = cli(capsys, "ls", url, "--endpoint-url", endpoint, "--json")  # no key needed
    assert listed.code == 0, listed.err
    jsonschema.validate(listed.json, schema("ls"))
    assert listed.json["namespaces"] == []
    assert [(t["tenant"], t["namespace_count"], t["blocks"], t["bytes"])
            for t in listed.json["tenants"]] == [("acme", 1, 3, 3 * 4096),
                                                  ("globex", 1, 3, 3 * 4096)]
    table = cli(capsys, "ls", url, "--endpoint-url", endpoint)
    assert "TENANT  NAMESPACES  BLOCKS" in table.out and "2 tenants at" in table.out

    one = cli(capsys, "ls", url, "--tenant", "acme", *conn, "--json").json
    assert [n["folder"] for n in one["namespaces"]] == [NS.folder]
    assert one["location"] == f"{url}/tenants/acme" and one["tenants"] == []
    monkeypatch.setenv("S3KV_TENANT", "globex")
    assert cli(capsys, "verify", url, "--deep", *conn).code == 0
    monkeypatch.delenv("S3KV_TENANT")

    blind = cli(capsys, "verify", url, "--tenant", "acme", "--endpoint-url", endpoint,
                "--deep")  # no secret: the tenant's objects answer no byte
    assert blind.code == 4 and "encrypted with a customer key (SSE-C)" in blind.err
    assert rule.refused

    back = tmp_path / "back"
    assert cli(capsys, "pull", url, str(back), "--tenant", "acme", *conn).code == 0
    assert sorted(p.relative_to(back) for p in back.rglob("*.bin")) == sorted(
        p.relative_to(src) for p in src.rglob("*.bin"))

    gone = cli(capsys, "rm", url, "--tenant", "acme", "--yes", *conn)
    assert gone.code == 0, gone.err
    assert "rm: freed 12.0 KiB (3 blocks, 1 manifest" in gone.out
    assert {k.split("/")[2] for k in keys_in(s3, bucket)} == {"globex"}
    left = cli(capsys, "ls", url, "--endpoint-url", endpoint, "--json").json
    assert [t["tenant"] for t in left["tenants"]] == ["globex"]


@pytest.mark.parametrize("tenant", ["../x", "%2e%2e", "A" * 70, "\u0430cme", "acme/../b"])
def test_a_hostile_tenant_is_refused_before_any_request(
    capsys: Any, tmp_path: Path, moto_server: str, bucket: str, s3: Any, tenant: str
) -> None:
    src = tmp_path / "src"
    write_tree(src, NS, 1)
    got = cli(capsys, "push", str(src), f"s3://{bucket}/kv", "--tenant", tenant,
              "--endpoint-url", moto_server)
    assert got.code == 2
    assert "--tenant" in got.err and "a tenant id is 1-63 characters" in got.err
    assert keys_in(s3, bucket) == []


def test_rm_without_a_filter_still_needs_a_tenant(capsys: Any, moto_server: str,
                                                  bucket: str) -> None:
    got = cli(capsys, "rm", f"s3://{bucket}/kv", "--yes", "--endpoint-url", moto_server)
    assert got.code == 2 and "--tenant NAME" in got.err


def test_a_tenant_with_directories_only_is_refused(capsys: Any, tmp_path: Path) -> None:
    got = cli(capsys, "ls", str(tmp_path), "--tenant", "acme")
    assert got.code == 2 and "applies to s3:// locations" in got.err


def test_key_names_a_tenants_keys(capsys: Any) -> None:
    got = cli(capsys, "key", "s3://bucket/kv", "--tenant", "acme", "--model", "m",
              "--tokens-per-hash", "16", "--dtype", "float16", "--group", "16:l0",
              "--block-hash", "00a1b2", "--json")
    assert got.code == 0
    assert got.json["block_keys"][0]["key"].startswith("s3://bucket/kv/tenants/acme/m_")
    bare = cli(capsys, "key", "--tenant", "acme", "--model", "m", "--tokens-per-hash", "16",
               "--dtype", "float16", "--group", "16:l0", "--json")
    assert bare.json["manifest_key"].startswith("tenants/acme/m_")
