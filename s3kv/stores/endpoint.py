"""One endpoint for every request: what boto3 resolves, for both data paths.

boto3 finds the endpoint in many places (``--endpoint-url``, ``AWS_ENDPOINT_URL_S3``,
``AWS_ENDPOINT_URL``, a profile's ``endpoint_url``, its ``services`` section) and turns it
into a URL per bucket with S3's endpoint ruleset (partition such as ``amazonaws.com.cn``,
FIPS and dual-stack flags, virtual-hosted or path addressing, a path in the endpoint
URL). s3kv resolves the configured endpoint once (:func:`configured_endpoint`, checked so
no message repeats a secret), hands it to the boto3 client, and the awscrt data path
takes its host, path and signing region from what botocore's endpoint ruleset resolves
for the bucket (:func:`data_endpoint`): the control plane and the data path cannot
disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from botocore.configprovider import ConfiguredEndpointProvider
from botocore.exceptions import EndpointResolutionError

from s3kv.errors import SettingsError
from s3kv.settings import S3Settings, display_url, endpoint_problem

_PROBE_KEY = "k"


@dataclass(frozen=True, slots=True)
class DataEndpoint:
    """Where the awscrt data path sends a bucket's requests."""

    url: str
    """The endpoint as messages show it (scheme, host, port, path; nothing secret)."""
    tls: bool
    host: str
    """The ``Host`` header: host and port as in the URL."""
    hostname: str
    """The name TLS checks the certificate against."""
    path: str
    """What precedes a key in the request path: ``/bucket``, ``/gw/bucket`` or ``""``."""
    region: str


def configured_endpoint(session: Any, settings: S3Settings) -> str | None:
    """The custom endpoint boto3 would use, or None for AWS's own endpoints.

    ``settings.endpoint_url`` (flags, ``S3KV_*``/``AWS_ENDPOINT_URL*``) first, then what
    the profile configures (its ``endpoint_url`` or ``services`` section), unless
    ``ignore_configured_endpoint_urls`` is set. Refused with a :class:`SettingsError`
    that shows no user info, query or fragment when botocore and awscrt could not both
    use it.
    """
    url = settings.endpoint_url
    source = "endpoint_url"
    if url is None:
        core = session._session  # boto3 keeps botocore's session here
        if core.get_config_variable("ignore_configured_endpoint_urls"):
            return None
        provider = ConfiguredEndpointProvider(
            full_config=core.full_config,
            scoped_config=core.get_scoped_config(),
            client_name="s3",
        )
        url = provider.provide()
        source = "the endpoint_url of the AWS profile or its services section"
    if url is None:
        return None
    problem = endpoint_problem(url)
    if problem is not None:
        raise SettingsError(f"{problem} (from {source})")
    return str(url)


def addressing_style(
    settings: S3Settings, endpoint: str | None
) -> Literal["auto", "path", "virtual"]:
    """``auto`` means path-style with a custom endpoint (what MinIO and Ceph want),
    wherever the endpoint was configured."""
    if settings.addressing_style == "auto" and endpoint is not None:
        return "path"
    return settings.addressing_style


def data_endpoint(client: Any, bucket: str) -> DataEndpoint:
    """The scheme, host, path prefix and signing region boto3 uses for ``bucket``: what
    botocore's endpoint ruleset resolves for a GetObject, as it does for every request.
    (A presigned URL would not do: botocore presigns some regions on the legacy global
    endpoint.)"""
    operation = client.meta.service_model.operation_model("GetObject")
    try:
        url, _, properties = client._resolve_endpoint_ruleset(
            operation, {"Bucket": bucket, "Key": _PROBE_KEY}, {}
        )
    except EndpointResolutionError as exc:
        raise SettingsError(
            f"no S3 endpoint for bucket {bucket!r} with these settings ({exc}); check "
            "--region, AWS_USE_FIPS_ENDPOINT and AWS_USE_DUALSTACK_ENDPOINT"
        ) from None
    parts = urlsplit(url)
    if not parts.hostname:  # pragma: no cover - botocore's shape
        raise SettingsError(
            f"cannot tell where boto3 sends requests for bucket {bucket!r} "
            f"({display_url(url)}); pass --endpoint-url"
        )
    schemes = properties.get("authSchemes") or ()
    region = next((a["signingRegion"] for a in schemes if a.get("signingRegion")), None)
    return DataEndpoint(
        url=display_url(client.meta.endpoint_url),
        tls=parts.scheme == "https",
        host=parts.netloc.rpartition("@")[2],
        hostname=parts.hostname,
        path=parts.path.rstrip("/"),
        region=region or client.meta.region_name or "us-east-1",
    )
