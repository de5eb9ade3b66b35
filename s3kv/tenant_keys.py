"""A key per tenant: derived from the operator's secret and the tenant id (HKDF-SHA256).

One secret, in a file the operator provides (``--sse-c-secret-file``,
``S3KV_SSE_C_SECRET_FILE``, the tier's ``sse_c_secret_file``), gives every tenant a
256-bit key of its own (RFC 5869, HKDF with SHA-256: extract with a fixed salt, expand
with the tenant id as info), so no key is stored anywhere and any node holding the secret
derives the same keys. A key opens one tenant's objects only; the secret opens all of
them. Neither is ever logged, shown in a message or kept in settings: the settings hold
the file's path, and the secret is read where a store opens.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from s3kv.errors import SettingsError

MIN_SECRET_BYTES = 32
"""The shortest secret accepted (after surrounding white space is stripped): 256 bits of
entropy when random bytes, about 190 as base64 text."""

MAX_SECRET_BYTES = 4096

KEY_BYTES = 32
"""SSE-C keys are AES-256 keys."""

_SALT = b"s3kv sse-c v1"
_INFO = b"s3kv tenant "


def read_secret(path: Path) -> bytes:
    """The secret in ``path``, surrounding white space stripped (``openssl rand -base64
    48 > FILE`` writes a line). :class:`SettingsError` names the file and the fix, never
    a byte of what it holds."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise SettingsError(
            f"sse_c_secret_file {str(path)!r}: {exc.strerror or exc}; give a readable file "
            "holding the secret (e.g. openssl rand -base64 48 > FILE; chmod 600 FILE)"
        ) from None
    secret = data.strip()
    if len(data) > MAX_SECRET_BYTES:
        raise SettingsError(
            f"sse_c_secret_file {str(path)!r} is larger than {MAX_SECRET_BYTES} bytes: not "
            "a secret file (e.g. openssl rand -base64 48 > FILE)"
        )
    if len(secret) < MIN_SECRET_BYTES:
        raise SettingsError(
            f"sse_c_secret_file {str(path)!r} holds {len(secret)} bytes; a secret needs at "
            f"least {MIN_SECRET_BYTES} (e.g. openssl rand -base64 48 > FILE)"
        )
    return secret


def derive_key(secret: bytes, tenant: str) -> bytes:
    """The 32-byte key of ``tenant`` (a valid tenant id) under ``secret``: HKDF-SHA256."""
    prk = hmac.new(_SALT, secret, hashlib.sha256).digest()
    return hmac.new(prk, _INFO + tenant.encode("ascii") + b"\x01", hashlib.sha256).digest()
