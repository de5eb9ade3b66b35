"""Connection settings: explicit arguments, then ``S3KV_*``, then ``AWS_*``, then defaults.

Credentials come from boto3's standard chain (environment, profile, instance role) unless
given explicitly; they are ``SecretStr`` so they never show in reprs, logs or errors.
``AWS_PROFILE`` is not copied into :attr:`S3Settings.profile`: boto3 reads it itself, as
a default that keys in the environment override, while a profile named here
(``--profile``, ``S3KV_PROFILE``) is explicit and its keys win (botocore's rule).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from s3kv.errors import SettingsError

MiB = 1024 * 1024

ChecksumAlgorithm = Literal["crc32c", "crc32", "sha256", "none"]
AddressingStyle = Literal["auto", "path", "virtual"]
ChecksumCalculation = Literal["when_required", "when_supported"]
DataPath = Literal["auto", "crt", "botocore"]

# setting -> environment variables, first found wins (S3KV_* before the standard AWS_*).
ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "endpoint_url": ("S3KV_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "region": ("S3KV_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"),
    # AWS_PROFILE is boto3's own (see the module doc): an explicit profile would change
    # whose keys sign.
    "profile": ("S3KV_PROFILE",),
    "access_key_id": ("S3KV_ACCESS_KEY_ID",),
    "secret_access_key": ("S3KV_SECRET_ACCESS_KEY",),
    "session_token": ("S3KV_SESSION_TOKEN",),
    "addressing_style": ("S3KV_ADDRESSING_STYLE",),
    "checksum": ("S3KV_CHECKSUM",),
    "checksum_calculation": ("S3KV_CHECKSUM_CALCULATION",),
    "max_attempts": ("S3KV_MAX_ATTEMPTS", "AWS_MAX_ATTEMPTS"),
    "deadline_seconds": ("S3KV_DEADLINE_SECONDS",),
    "connect_timeout_seconds": ("S3KV_CONNECT_TIMEOUT",),
    "read_timeout_seconds": ("S3KV_READ_TIMEOUT",),
    "min_rate_bytes_per_second": ("S3KV_MIN_RATE",),
    "concurrency": ("S3KV_CONCURRENCY",),
    "max_connections": ("S3KV_MAX_CONNECTIONS",),
    "verify_tls": ("S3KV_VERIFY_TLS",),
    "ca_bundle": ("S3KV_CA_BUNDLE", "AWS_CA_BUNDLE"),
    "proxy_ca_bundle": ("S3KV_PROXY_CA_BUNDLE",),
    "multipart_threshold_bytes": ("S3KV_MULTIPART_THRESHOLD_BYTES",),
    "multipart_chunk_bytes": ("S3KV_MULTIPART_CHUNK_BYTES",),
    "tag_blocks": ("S3KV_TAG_BLOCKS",),
    "data_path": ("S3KV_DATA_PATH",),
    "sse_c_secret_file": ("S3KV_SSE_C_SECRET_FILE",),
}


_BOOLEANS = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}


class S3Settings(BaseModel):
    """How s3kv talks to an S3-compatible store.

    Build with :meth:`resolve` to fill unset values from the environment::

        S3Settings.resolve(endpoint_url="http://minio:9000", concurrency=64)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint_url: str | None = None
    """Custom endpoint (MinIO, Ceph, moto). None: AWS S3."""
    region: str | None = None
    addressing_style: AddressingStyle = "auto"
    """``auto`` means path-style with a custom endpoint (what MinIO and Ceph want)."""
    profile: str | None = None
    """A profile of ``~/.aws/config`` named explicitly: its keys win over
    ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (boto3's ``profile_name``). None: boto3
    picks ``AWS_PROFILE`` itself, where keys in the environment win."""
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    checksum: ChecksumAlgorithm = "crc32c"
    """s3kv's end-to-end block checksum, kept in object metadata (works on every store)."""
    checksum_calculation: ChecksumCalculation = "when_required"
    """boto3's own flexible checksums. ``when_required`` works on every store (Ceph RGW
    over TLS rejects boto3's default streaming checksums); s3kv checks blocks itself."""
    max_attempts: int = Field(default=8, ge=1, le=100)
    deadline_seconds: float = Field(default=120.0, gt=0)
    """Give up retrying one object after this long."""
    backoff_base_seconds: float = Field(default=0.05, gt=0)
    backoff_max_seconds: float = Field(default=5.0, gt=0)
    connect_timeout_seconds: float = Field(default=10.0, gt=0)
    read_timeout_seconds: float = Field(default=60.0, gt=0)
    """A request that moved no byte for this long is cancelled and retried."""
    min_rate_bytes_per_second: float = Field(default=1 * MiB, gt=0)
    """The slowest a body may move: one request must end within the connect and read
    timeouts plus its body at this rate, or it is cancelled and retried (a trickle ends
    like a stall)."""
    concurrency: int = Field(default=32, ge=1, le=1024)
    """Requests in flight at once; the connection pool is sized to match."""
    max_connections: int | None = Field(default=None, ge=1, le=1024)
    """At most this many connections for the whole client, whatever ``concurrency`` asks
    (the vLLM tier sizes its pool for stores, loads and lookups together; this caps it,
    e.g. to a store's per-client connection limit). None: no cap."""
    verify_tls: bool = True
    ca_bundle: Path | None = None
    proxy_ca_bundle: Path | None = None
    """PEM file of CAs to trust for an ``https://`` proxy (``HTTPS_PROXY``), as botocore's
    ``proxies_config``; None: the AWS profile's ``proxy_ca_bundle``, else the system's CAs."""
    multipart_threshold_bytes: int = Field(default=64 * MiB, ge=5 * MiB)
    multipart_chunk_bytes: int = Field(default=16 * MiB, ge=5 * MiB, le=5 * 1024 * MiB)
    tag_blocks: bool = True
    """Tag block objects ``s3kv-object=block`` so a lifecycle rule can expire blocks and
    never manifests. Turn off for stores without object tagging."""
    data_path: DataPath = "auto"
    """Block PUT/GET/HEAD on awscrt's native client (``crt``; ``auto`` picks it,
    :mod:`s3kv.stores.crt`) or on botocore. Listing, deletes, multipart uploads, copies
    and tags always use botocore."""

    sse_c_secret_file: Path | None = None
    """A file holding the operator's secret (at least 32 bytes; surrounding white space
    is ignored): each tenant's objects are encrypted at rest with a key derived from it
    and the tenant id (SSE-C, :mod:`s3kv.stores.sse_c`). Objects outside every tenant's
    prefix are not encrypted. The secret is read when a store opens, never logged."""

    @field_validator("sse_c_secret_file")
    @classmethod
    def _secret(cls, path: Path | None) -> Path | None:
        if path is not None:
            from s3kv.tenant_keys import read_secret

            read_secret(path)  # a clear error now, not at the first request
        return path

    @field_validator("ca_bundle", "proxy_ca_bundle")
    @classmethod
    def _readable(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError("not a readable file; give the path of a PEM file of CAs")
        return path

    @model_validator(mode="after")
    def _check(self) -> S3Settings:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("give both access_key_id and secret_access_key, or neither")
        if self.endpoint_url is not None:
            _check_endpoint(self.endpoint_url)
        return self

    @property
    def resolved_addressing_style(self) -> Literal["path", "virtual", "auto"]:
        if self.addressing_style == "auto" and self.endpoint_url is not None:
            return "path"
        return self.addressing_style

    @classmethod
    def resolve(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> S3Settings:
        """Arguments (non-None) first, then ``S3KV_*`` and ``AWS_*`` variables, then defaults."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, variables in ENVIRONMENT.items():
            for var in variables:
                if env.get(var):
                    values[name] = env[var]
                    break
        path_style = env.get("S3KV_PATH_STYLE", "").strip().lower()
        if path_style and "addressing_style" not in values:
            if path_style not in _BOOLEANS:
                raise SettingsError(
                    f"S3KV_PATH_STYLE={env['S3KV_PATH_STYLE']!r}: use true or false"
                )
            values["addressing_style"] = "path" if _BOOLEANS[path_style] else "auto"
        values.update({k: v for k, v in overrides.items() if v is not None})
        unknown = set(values) - set(cls.model_fields)
        if unknown:
            raise SettingsError(f"unknown setting(s) {sorted(unknown)}")
        try:
            return cls(**values)
        except ValidationError as exc:
            raise SettingsError(_explain(exc, env)) from None

    def __repr__(self) -> str:
        shown = {
            k: v
            for k, v in self.__dict__.items()
            if v is not None and v != type(self).model_fields[k].default
        }
        body = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"S3Settings({body})"


def display_url(url: str) -> str:
    """An endpoint URL fit for a message: scheme, host, port and path only.

    User info, query and fragment may hold secrets (``user:password@``,
    ``X-Amz-Signature=...``), so no message ever shows them; nor an authority that looks
    like a mangled password (percent-encoded, or a port that is not a number).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "<endpoint>"
    rest = re.split(r"[?#]", rest, maxsplit=1)[0]
    authority, slash, path = rest.partition("/")
    authority = authority.rpartition("@")[2]
    bare = authority.rpartition("]")[2]  # what follows a bracketed IPv6 address
    port = bare.rpartition(":")[2] if ":" in bare else "0"
    if "%" in bare or not port.isdigit():
        authority = "<host hidden>"
    return f"{scheme}://{authority}{slash}{path}"


def endpoint_problem(url: str) -> str | None:
    """Why botocore and awscrt could not both use ``url``, or None.

    The message never repeats user info, a query, a fragment, or an authority that could
    be a mangled password (percent-encoded characters, a port that is not a number).
    """
    if not url.lower().startswith(("http://", "https://")):
        return "endpoint_url must start with http:// or https://, e.g. http://minio:9000"
    if any(ord(c) <= 32 or ord(c) == 127 for c in url):
        return (
            "endpoint_url holds a space or control character; give scheme, host, port and "
            "optionally a path, e.g. http://minio:9000"
        )
    authority = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]
    host_part = authority.rpartition("]")[2] if authority.startswith("[") else authority
    if "@" in authority or "%" in host_part:
        # Not echoed: the part before "@" (or written as %40/%3A) may be a password.
        return (
            "endpoint_url must not hold a user name or password (also not percent-encoded); "
            "give credentials through AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or --profile"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return (
            "endpoint_url is not a valid URL (a bracketed IPv6 address, or a port from 1 to "
            "65535); e.g. http://minio:9000 or http://[::1]:9000"
        )
    shown = display_url(url)
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return (
            f"endpoint_url {shown!r} has a query or fragment (not shown: it may hold a "
            "signature or token); give scheme, host, port and optionally a path"
        )
    if not parts.hostname:
        return f"endpoint_url {shown!r} names no host; e.g. http://minio:9000"
    if port == 0:
        return f"endpoint_url {shown!r} has port 0; e.g. http://minio:9000"
    return None


def _check_endpoint(url: str) -> None:
    problem = endpoint_problem(url)
    if problem is not None:
        raise ValueError(problem)


def _explain(exc: ValidationError, env: Mapping[str, str]) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        where = next((v for v in ENVIRONMENT.get(field, ()) if env.get(v)), None)
        source = f" (from ${where})" if where else ""
        value = "<secret>" if "secret" in field or "token" in field else repr(err.get("input"))
        if field == "endpoint_url" and isinstance(err.get("input"), str):
            value = repr(display_url(err["input"]))
        if not field:
            parts.append(err["msg"].removeprefix("Value error, "))
        else:
            message = err["msg"].removeprefix("Value error, ")
            parts.append(f"{field}={value}{source}: {message[:1].lower()}{message[1:]}")
    return "invalid S3 settings: " + "; ".join(parts)
