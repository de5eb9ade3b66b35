"""The user's network, as botocore reads it, for every request s3kv makes.

Proxies: ``HTTP_PROXY``, ``HTTPS_PROXY`` and ``NO_PROXY`` (upper or lower case), as
botocore honours them: a proxy carries plain HTTP as a forward proxy and TLS through a
``CONNECT`` tunnel. boto3 (the control plane) reads them through urllib; awscrt (block
data) reads the same variables itself. This module tells which proxy carries requests to
an endpoint, so that a failure names it.

Trust: the CA bundle is ``--ca-bundle``/``S3KV_CA_BUNDLE``, else ``AWS_CA_BUNDLE``, else
the AWS profile's ``ca_bundle``; both clients are given the same file. An ``https://``
proxy is trusted with ``S3KV_PROXY_CA_BUNDLE``, else the profile's ``proxy_ca_bundle``:
boto3 gets it as botocore's ``proxies_config`` (botocore reads the profile's key but does
not apply it to a client by itself); awscrt cannot be given one (its S3 client checks a
proxy's certificate against the system's CAs only), so its client refuses to start with
one set (:func:`s3kv.stores.crt_client.new_client`).
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from s3kv.errors import SettingsError, StoreError, TransientStoreError
from s3kv.settings import S3Settings, display_url

AWS_S3 = "https://s3.amazonaws.com"
"""Stands for AWS's own endpoints in messages and proxy choice (all are https)."""


@dataclass(frozen=True, slots=True)
class Network:
    """How requests reach one endpoint: the proxy (if any) and the TLS trust."""

    endpoint: str
    verify: bool
    ca_bundle: str | None
    proxy: str | None = None
    """The proxy's URL as shown (no user info), or None for a direct connection."""
    proxy_source: str = ""
    """The variable that named the proxy (``HTTPS_PROXY`` ...)."""
    proxy_ca_bundle: str | None = None
    """The CAs an ``https://`` proxy's certificate is checked against (None: the system's)."""

    @property
    def shown(self) -> str:
        return display_url(self.endpoint)

    @property
    def via(self) -> str:
        if self.proxy is None:
            return ""
        return f" through the proxy {self.proxy} (from {self.proxy_source})"

    def unreachable(self, method: str, where: str, detail: str) -> TransientStoreError:
        """A connection that could not be made: through the proxy, or to the endpoint."""
        if self.proxy is not None:
            trust = self._proxy_trust()
            also = f" and {trust}" if trust else ""
            return TransientStoreError(
                f"{method} {where}: cannot reach {self.shown} through the proxy "
                f"{self.proxy} (from {self.proxy_source}): {detail}; check that the proxy "
                f"is up{also}, or list the endpoint's host in NO_PROXY to bypass it"
            )
        return TransientStoreError(
            f"{method} {where}: cannot connect to {self.shown}: {detail}; check "
            "--endpoint-url and that the store is up"
        )

    def tls_failed(self, method: str, where: str, detail: str) -> StoreError:
        """A TLS handshake that failed: plain HTTP on the port, or an unknown CA."""
        if any(sign in detail for sign in PLAIN_HTTP_SIGNS):
            plain = self.shown.replace("https://", "http://", 1)
            return StoreError(
                f"{method} {where}: {self.shown} answered in plain HTTP, not TLS: the URL "
                f"says https:// but the port speaks HTTP; use {plain} (or the store's TLS "
                "port) in --endpoint-url"
            )
        trust = self._proxy_trust()
        first = f"check {trust}; " if trust else ""
        return StoreError(
            f"{method} {where}: TLS with {self.shown}{self.via} failed ({detail}); {first}if the "
            "server's certificate is signed by a private CA, pass it with --ca-bundle "
            "(S3KV_CA_BUNDLE, AWS_CA_BUNDLE or the profile's ca_bundle), or --no-verify-tls "
            "for testing; if the endpoint speaks plain HTTP, use http:// in --endpoint-url"
        )

    def _proxy_trust(self) -> str:
        """How an ``https://`` proxy is trusted (its own handshake comes first), or ""."""
        if self.proxy is None or not self.proxy.lower().startswith("https://"):
            return ""
        if self.proxy_ca_bundle is not None:
            return f"that the proxy's certificate is signed by a CA of {self.proxy_ca_bundle}"
        return (
            "that the proxy's certificate is trusted (a private CA: set S3KV_PROXY_CA_BUNDLE "
            "or the AWS profile's proxy_ca_bundle)"
        )


PLAIN_HTTP_SIGNS = (
    "WRONG_VERSION_NUMBER",
    "wrong version number",
    "record layer failure",
    "packet length too long",
    "unknown protocol",
    "http request",
)
"""What OpenSSL (1.1 to 3.x) says when the other end of a handshake answers in plain
HTTP: an https:// URL pointed at an HTTP port."""


def network_for(endpoint: str | None, settings: S3Settings, session: Any) -> Network:
    """The network of requests to ``endpoint`` (None: AWS's own endpoints)."""
    url = endpoint or AWS_S3
    ca = _ca_bundle(settings, session)
    proxy, source = proxy_for(url)
    return Network(endpoint=url, verify=settings.verify_tls, ca_bundle=ca, proxy=proxy,
                   proxy_source=source, proxy_ca_bundle=proxy_ca_bundle(settings, session)[0])


def proxy_ca_bundle(settings: S3Settings, session: Any) -> tuple[str | None, str]:
    """The CA file for an ``https://`` proxy and where it was set; ``(None, "")`` for the
    system's CAs. ``S3KV_PROXY_CA_BUNDLE`` first, then the AWS profile's ``proxy_ca_bundle``
    (botocore reads it into its ``proxies_config`` but leaves it to the caller)."""
    if settings.proxy_ca_bundle is not None:
        return str(settings.proxy_ca_bundle), "S3KV_PROXY_CA_BUNDLE"
    core = session._session  # boto3 keeps botocore's session here
    configured = (core.get_config_variable("proxies_config") or {}).get("proxy_ca_bundle")
    if not configured:
        return None, ""
    path = Path(str(configured)).expanduser()
    if not path.is_file():
        raise SettingsError(
            f"the proxy CA bundle {str(path)!r} (the AWS profile's proxy_ca_bundle) is not a "
            "readable file; fix the path or set S3KV_PROXY_CA_BUNDLE"
        )
    return str(path), "the AWS profile's proxy_ca_bundle"


def _ca_bundle(settings: S3Settings, session: Any) -> str | None:
    if not settings.verify_tls:
        return None
    if settings.ca_bundle is not None:
        return str(settings.ca_bundle)
    core = session._session  # boto3 keeps botocore's session here
    configured = core.get_config_variable("ca_bundle")  # AWS_CA_BUNDLE, then the profile
    if not configured:
        return None
    path = Path(str(configured)).expanduser()
    if not path.is_file():
        raise SettingsError(
            f"the CA bundle {str(path)!r} (AWS_CA_BUNDLE or the profile's ca_bundle) is not "
            "a readable file; fix the path or pass --ca-bundle"
        )
    return str(path)


def proxy_for(url: str) -> tuple[str | None, str]:
    """The proxy botocore would send requests to ``url`` through, as shown, and the
    variable that names it; ``(None, "")`` for a direct connection."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    try:
        if urllib.request.proxy_bypass(host):
            return None, ""
    except (TypeError, OSError):
        pass
    proxies = urllib.request.getproxies()
    scheme = parts.scheme or "https"
    proxy = proxies.get(scheme)
    if not proxy:
        return None, ""
    return display_url(proxy), f"{scheme.upper()}_PROXY"
