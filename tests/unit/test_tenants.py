"""Tenant ids, the place of a tenant's keys, its key, and the answers that refuse a key."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from s3kv import KeyMapper, Namespace, parse_key
from s3kv.errors import AccessDeniedError, CustomerKeyError, InvalidTenantError
from s3kv.naming.location import parse_location
from s3kv.naming.tenants import TENANT_FIELD, check_tenant, tenant_of_key, tenant_prefix
from s3kv.stores.rules import error_for
from s3kv.stores.sse_c import KeyRing
from s3kv.tenant_keys import derive_key

pytestmark = pytest.mark.unit

NS = Namespace(model_name="Qwen/Qwen3-0.6B", tokens_per_hash=16, dtype="bfloat16")
RULE = "a tenant id is 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or digit"

HOSTILE = {
    "dot-dot-slash": ("../", "holds '.', '/'"),
    "dot-dot": ("..", "holds '.'"),
    "percent-encoded": ("%2e%2e", "holds '%'"),
    "percent-slash": ("a%2Fb", "holds '%'"),
    "slash": ("acme/../globex", "holds '.', '/'"),
    "backslash": ("acme\\x", "holds '\\\\'"),
    "too-long": ("a" * 64, "is 64 characters long, more than 63"),
    "very-long": ("a" * 100_000, "is 100000 characters long"),
    "cyrillic-a": ("\u0430cme", "holds '\u0430'"),  # looks like "acme"
    "fullwidth": ("\uff41cme", "holds '\uff41'"),
    "dotless-i": ("\u0131d", "holds '\u0131'"),
    "zero-width": ("ac\u200bme", "holds U+200B"),
    "newline": ("acme\n", "holds U+000A"),
    "nul": ("acme\x00", "holds U+0000"),
    "space": ("ac me", "holds ' '"),
    "upper": ("Acme", "has upper-case letters"),
    "leading-dash": ("-acme", "does not start with a letter or digit"),
    "leading-underscore": ("_acme", "does not start with a letter or digit"),
    "empty": ("", "is empty"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_tenant_id_is_refused_with_the_rule(name: str) -> None:
    value, why = HOSTILE[name]
    with pytest.raises(InvalidTenantError) as info:
        check_tenant(value, source=f'kv_transfer_params["{TENANT_FIELD}"]')
    message = str(info.value)
    assert message.startswith('kv_transfer_params["s3kv_tenant"] ')
    assert why in message and RULE in message
    assert len(message) < 300  # a long value is cut, never echoed whole
    with pytest.raises(InvalidTenantError):
        parse_location("s3://bucket/kv").for_tenant(value)
    with pytest.raises(InvalidTenantError):
        tenant_prefix("kv", value)


@pytest.mark.parametrize("value", [None, 7, b"acme", ["acme"], {"t": "acme"}])
def test_a_tenant_that_is_no_string_is_refused(value: object) -> None:
    with pytest.raises(InvalidTenantError, match="must be a string"):
        check_tenant(value)


@pytest.mark.parametrize("value", ["a", "acme", "team-7", "t_01", "0", "a" * 63])
def test_valid_tenant_ids(value: str) -> None:
    assert check_tenant(value) == value


def test_a_tenants_keys_sit_above_vllms_layout_byte_for_byte() -> None:
    loc = parse_location("s3://bucket/kv").for_tenant("acme")
    assert loc.url == "s3://bucket/kv/tenants/acme"
    assert parse_location("s3://bucket").for_tenant("acme").prefix == "tenants/acme"
    offload_key = bytes(range(32)) + (2).to_bytes(4, "big")
    plain = KeyMapper(NS, prefix="kv").key_for(offload_key)
    tenants = KeyMapper(NS, prefix=loc.prefix).key_for(offload_key)
    assert tenants == plain.replace("kv/", "kv/tenants/acme/", 1)
    assert tenants == (
        f"kv/tenants/acme/{NS.folder}_r0/000/10_g2/"
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f.bin"
    )
    assert parse_key(tenants).relative_path == parse_key(plain).relative_path
    assert tenant_of_key(tenants) == "acme"
    assert tenant_of_key(KeyMapper(NS, prefix=loc.prefix).config_key()) == "acme"


@pytest.mark.parametrize("key", [
    f"kv/{NS.folder}_r0/000/01_g2/000102.bin",  # no tenant
    f"tenants/{NS.folder}/config.json",  # a location whose prefix is "tenants"
    f"kv/tenants/Acme/{NS.folder}/config.json",  # not a tenant id
    "kv/tenants/acme/lease.json",  # no block, no manifest
    "kv/tenants/acme/y/z/w.bin",  # one segment short of a block
])
def test_keys_outside_every_tenant(key: str) -> None:
    assert tenant_of_key(key) is None


def test_the_tenant_key_is_hkdf_sha256_of_the_secret_and_tenant() -> None:
    secret = b"0123456789abcdef0123456789abcdef-the-operator-secret"
    for tenant in ("acme", "globex"):
        theirs = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=b"s3kv sse-c v1",
            info=b"s3kv tenant " + tenant.encode(),
        ).derive(secret)
        assert derive_key(secret, tenant) == theirs
    assert derive_key(secret, "acme") != derive_key(secret, "globex")
    assert derive_key(secret, "acme") != derive_key(secret + b"!", "acme")


def test_the_key_ring_gives_each_tenants_objects_its_key() -> None:
    ring = KeyRing(b"s" * 32)
    block = KeyMapper(NS, prefix="kv/tenants/acme").block_key(b"\x01\x02\x03", 0)
    key = ring.key_for(block)
    assert key is not None and key.tenant == "acme"
    raw = derive_key(b"s" * 32, "acme")
    assert key.key_b64 == base64.b64encode(raw).decode()
    assert key.md5_b64 == base64.b64encode(hashlib.md5(raw).digest()).decode()
    assert dict(key.headers())["x-amz-server-side-encryption-customer-algorithm"] == "AES256"
    assert key.params("CopySourceSSECustomer")["CopySourceSSECustomerKeyMD5"] == key.md5_b64
    assert ring.key_for(KeyMapper(NS, prefix="kv").block_key(b"\x01\x02\x03", 0)) is None
    assert key.key_b64 not in repr(key) and key.key_b64 not in repr(ring)


@pytest.mark.parametrize(("code", "message"), [
    ("InvalidArgument", "The calculated MD5 hash of the key did not match the hash that was "
     "provided."),  # Ceph RGW 16, another key
    ("InvalidArgument", "Requests specifying Server Side Encryption with Customer provided "
     "keys must provide a valid encryption algorithm."),  # Ceph RGW 16, no key
    ("InvalidRequest", "The object was stored using a form of Server Side Encryption. The "
     "correct parameters must be provided to retrieve the object."),  # AWS, no key
])
def test_the_error_table_names_a_refused_customer_key(code: str, message: str) -> None:
    error = error_for("GET", "s3://b/kv/tenants/acme/x.bin", status=400, code=code,
                      message=message)
    assert isinstance(error, CustomerKeyError) and isinstance(error, AccessDeniedError)
    assert "encrypted with a customer key (SSE-C)" in str(error) and message in str(error)


def test_other_invalid_arguments_stay_what_they_were() -> None:
    error = error_for("GET", "s3://b/k", status=400, code="InvalidArgument",
                      message="Invalid version id specified")
    assert not isinstance(error, CustomerKeyError)
