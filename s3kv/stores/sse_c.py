"""Encryption at rest with a key per tenant: SSE-C on every request that touches an object.

With ``sse_c_secret_file`` set, a store encrypts each tenant's objects with that tenant's
key (:mod:`s3kv.tenant_keys`): the store derives the key from the object's key
(:func:`s3kv.naming.tenants.tenant_of_key`: the segment under ``tenants/`` above the
namespace folder) and sends it with every request that writes or reads the object, on
both clients:

* boto3: a ``before-parameter-build`` handler adds the key to GetObject, PutObject,
  CreateMultipartUpload and UploadPart, and to a CopyObject both as the destination's
  and as the source's key (``x-amz-copy-source-server-side-encryption-customer-*``);
* awscrt: :meth:`s3kv.stores.crt.CrtS3Store.start` adds the headers to each request.

Tags, listings and deletes carry none (S3 asks none). A request made with another key
(another tenant's, an older secret's) or none is refused by the store: Ceph RGW and AWS
answer 400 (:class:`s3kv.errors.CustomerKeyError`, from the one error table), AWS also
403 to a wrong key (:class:`s3kv.errors.AccessDeniedError`); no byte is served either
way. Objects outside every tenant's prefix are sent no key and stay unencrypted.
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from s3kv.naming.tenants import tenant_of_key
from s3kv.tenant_keys import derive_key, read_secret

ALGORITHM = "AES256"
"""The only SSE-C algorithm S3 knows."""

HEADER = "x-amz-server-side-encryption-customer-"
COPY_SOURCE_HEADER = "x-amz-copy-source-server-side-encryption-customer-"

_KEYED_OPERATIONS = ("GetObject", "PutObject", "CreateMultipartUpload", "UploadPart")
_MAX_KEYS_KEPT = 4096

# A GET of an object encrypted with a customer key is answered 400 when the key sent is
# not its key, or none was sent: AWS says InvalidRequest "...stored using a form of Server
# Side Encryption...", Ceph RGW 16 InvalidArgument "...MD5 hash of the key did not
# match..." or "...Server Side Encryption with Customer provided keys...".
_REFUSING_CODES = frozenset({"InvalidRequest", "InvalidArgument"})
_REFUSING_WORDS = re.compile(r"server side encryption|hash of the key|customer", re.I)
KEY_REFUSED = (
    "the object is encrypted with a customer key (SSE-C) other than the one this request "
    "sent, or it sent none: another tenant's object, one written before the secret was "
    "rotated, or a command run without --sse-c-secret-file and --tenant; its bytes are "
    "not served"
)
"""What :class:`s3kv.errors.CustomerKeyError` says (:func:`s3kv.stores.rules.error_for`)."""


def key_refused(code: str, message: str) -> bool:
    """Whether a 400 answer's code and message are a store refusing the customer key."""
    return code in _REFUSING_CODES and _REFUSING_WORDS.search(message) is not None


@dataclass(frozen=True, slots=True)
class CustomerKey:
    """One tenant's key as S3 takes it: base64, and the base64 MD5 S3 checks it with."""

    tenant: str
    key_b64: str = field(repr=False)
    md5_b64: str

    @classmethod
    def of(cls, tenant: str, key: bytes) -> CustomerKey:
        return cls(
            tenant,
            base64.b64encode(key).decode("ascii"),
            base64.b64encode(hashlib.md5(key, usedforsecurity=False).digest()).decode("ascii"),
        )

    def headers(self, prefix: str = HEADER) -> list[tuple[str, str]]:
        """The request headers (``prefix``: :data:`COPY_SOURCE_HEADER` for a copy's source)."""
        return [
            (prefix + "algorithm", ALGORITHM),
            (prefix + "key", self.key_b64),
            (prefix + "key-MD5", self.md5_b64),
        ]

    def params(self, member: str = "SSECustomer") -> dict[str, str]:
        """boto3's parameters (``member``: ``CopySourceSSECustomer`` for a copy's source).
        The MD5 is given, so botocore neither encodes the key again nor hashes it."""
        return {
            member + "Algorithm": ALGORITHM,
            member + "Key": self.key_b64,
            member + "KeyMD5": self.md5_b64,
        }


class KeyRing:
    """The keys of every tenant under one secret, derived on first use and kept."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._keys: dict[str, CustomerKey] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path) -> KeyRing:
        return cls(read_secret(path))

    def for_tenant(self, tenant: str) -> CustomerKey:
        found = self._keys.get(tenant)
        if found is None:
            found = CustomerKey.of(tenant, derive_key(self._secret, tenant))
            with self._lock:
                if len(self._keys) >= _MAX_KEYS_KEPT:
                    self._keys.clear()  # derived again on demand: a few microseconds each
                self._keys[tenant] = found
        return found

    def key_for(self, object_key: str) -> CustomerKey | None:
        """The key an object is written and read with; None outside every tenant."""
        tenant = tenant_of_key(object_key)
        return None if tenant is None else self.for_tenant(tenant)

    def __repr__(self) -> str:
        return f"KeyRing({len(self._keys)} tenant keys derived)"


def key_headers(keys: KeyRing | None, object_key: str) -> list[tuple[str, str]]:
    """The headers of a request to ``object_key`` (awscrt's): its tenant's key, if any."""
    key = keys.key_for(object_key) if keys is not None else None
    return [] if key is None else key.headers()


def traced(keys: KeyRing | None, object_key: str) -> dict[str, str]:
    """What the trace records of a request's key: its MD5 (never the key), if any."""
    key = keys.key_for(object_key) if keys is not None else None
    return {} if key is None else {"sse_c_key_md5": key.md5_b64}


def keyring_for(secret_file: Path | None) -> KeyRing | None:
    """The key ring of a store's settings (None: nothing is encrypted by s3kv)."""
    return None if secret_file is None else KeyRing.from_file(secret_file)


def send_keys(client: Any, keys: KeyRing) -> None:
    """Make ``client`` (boto3's) send each object's key with every request that writes or
    reads it, and a copy's source key with its source."""

    def add(params: dict[str, Any], **_: Any) -> None:
        key = keys.key_for(str(params.get("Key", "")))
        if key is not None:
            params.update(key.params())
        source = params.get("CopySource")
        if isinstance(source, str):  # botocore's own handler made it "bucket/key" already
            source = {"Key": unquote(source.split("?", 1)[0]).lstrip("/").partition("/")[2]}
        if isinstance(source, dict):
            source_key = keys.key_for(str(source.get("Key", "")))
            if source_key is not None:
                params.update(source_key.params("CopySourceSSECustomer"))

    for operation in (*_KEYED_OPERATIONS, "CopyObject"):
        client.meta.events.register(
            f"before-parameter-build.s3.{operation}", add, unique_id=f"s3kv-sse-c-{operation}"
        )
