"""awscrt's S3 client as s3kv builds it: its endpoint, TLS, part size, retries and
credentials (those boto3's chain found, handed over once or refreshed through boto3).

Its proxy is the environment's (``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY``, read by
aws-c-s3 itself); awscrt's Python ``S3Client`` takes no proxy options, so an ``https://``
proxy's certificate is checked against the system's CAs only: with a proxy CA bundle set
for it (:func:`s3kv.stores.network.proxy_ca_bundle`) the client refuses to start rather
than fail every request on a handshake.
"""

from __future__ import annotations

import threading
from typing import Any

from awscrt import auth, s3
from awscrt import io as crt_io
from botocore.credentials import RefreshableCredentials

from s3kv.errors import AccessDeniedError, SettingsError
from s3kv.settings import S3Settings
from s3kv.stores.endpoint import DataEndpoint
from s3kv.stores.network import proxy_ca_bundle, proxy_for
from s3kv.stores.s3_client import new_session

PART_BYTES = 8 * 1024 * 1024
"""awscrt's part size: its buffer pool keeps part-sized chunks for reuse, and serves a
request of up to four parts from them (larger ones are allocated per request)."""

MAX_REQUEST_BYTES = PART_BYTES
"""A block larger than this is read as several ranged requests, each at most one part.
awscrt hands a request's body to Python whole, as one new ``bytes``: at four parts a
request, a 32 MiB body (just past the largest mmap threshold glibc adapts to) was a fresh
mapping, faulted in page by page, for every block. Loading 512 MiB of 32 MiB blocks that
way took 1.592 s of CPU per GiB against 1.03 for bare awscrt, which splits a GET into
8 MiB parts itself (bench/evidence/worker-clients-file.json); at one part a request,
1.053 against its 0.97, and 0.782 s against its 0.806 (worker-clients-parts.json). The
tier's I/O process, whose mmap threshold kept such bodies on the heap, is unchanged by
it (load-parts.json)."""


def new_client(
    target: DataEndpoint, settings: S3Settings, ca_bundle: str | None,
    provider: auth.AwsCredentialsProvider,
) -> s3.S3Client:
    _refuse_proxy_ca(target, settings)
    elg = crt_io.EventLoopGroup(0)
    bootstrap = crt_io.ClientBootstrap(elg, crt_io.DefaultHostResolver(elg))
    kwargs: dict[str, Any] = {}
    if target.tls:
        options = crt_io.TlsContextOptions()
        if ca_bundle is not None:
            options.override_default_trust_store_from_path(ca_filepath=ca_bundle)
        options.verify_peer = settings.verify_tls
        connection = crt_io.ClientTlsContext(options).new_connection_options()
        connection.set_server_name(target.hostname)
        kwargs["tls_connection_options"] = connection
    return s3.S3Client(
        bootstrap=bootstrap,
        region=target.region,
        tls_mode=s3.S3RequestTlsMode.ENABLED if target.tls else s3.S3RequestTlsMode.DISABLED,
        credential_provider=provider,
        part_size=PART_BYTES,
        # PUTs stay single-part: larger objects are boto3's multipart uploads.
        multipart_upload_threshold=settings.multipart_threshold_bytes + 1,
        max_active_connections_override=settings.concurrency,
        # s3kv.retry owns attempts, backoff, Retry-After and the deadline. awscrt
        # cannot be told to never retry (0 means its default, 5), so its retry bucket
        # holds one token: at most one quick retry, refilled only by a success, and
        # none at all while every request fails. (awscrt retries 500 and 503 itself
        # and then reports them without the response: their Retry-After is lost on
        # this path; 429, 502 and 504 come back with it.)
        retry_config=s3.S3RetryConfig(
            max_retries=1, backoff_scale_factor_ms=5, initial_bucket_capacity=1
        ),
        connect_timeout_ms=int(settings.connect_timeout_seconds * 1000),
        **kwargs,
    )


def _refuse_proxy_ca(target: DataEndpoint, settings: S3Settings) -> None:
    """A :class:`SettingsError` when ``target`` is reached through an ``https://`` proxy
    that is to be trusted with a CA bundle: awscrt cannot be given one."""
    scheme = "https" if target.tls else "http"
    proxy, source = proxy_for(f"{scheme}://{target.host}")
    if proxy is None or not proxy.lower().startswith("https://"):
        return
    ca, where = proxy_ca_bundle(settings, new_session(settings))
    if ca is None:
        return
    raise SettingsError(
        f"the proxy {proxy} (from {source}) is to be trusted with the CA bundle {ca!r} "
        f"(from {where}), and the awscrt data path cannot take one: awscrt checks an "
        "https:// proxy's certificate against the system's CAs only; set "
        "S3KV_DATA_PATH=botocore (data_path='botocore'), whose client trusts it, "
        "or add the CA to the system's trust store and unset the proxy CA bundle"
    )


def credentials_provider(credentials: Any) -> auth.AwsCredentialsProvider:
    """The credentials boto3's chain found, for awscrt's signer.

    Static ones (keys, environment, profile files) are handed over once: a delegate would
    call into Python, under the GIL, for every request signed. Refreshable ones (roles,
    SSO) go through a delegate so boto3 keeps refreshing them.
    """
    if credentials is None:
        raise AccessDeniedError(
            "no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "or pick a profile with --profile/AWS_PROFILE"
        )
    if not isinstance(credentials, RefreshableCredentials):
        frozen = credentials.get_frozen_credentials()
        return auth.AwsCredentialsProvider.new_static(
            frozen.access_key, frozen.secret_key, frozen.token
        )
    lock = threading.Lock()

    def get() -> auth.AwsCredentials:
        with lock:
            frozen = credentials.get_frozen_credentials()
        return auth.AwsCredentials(frozen.access_key, frozen.secret_key, frozen.token)

    return auth.AwsCredentialsProvider.new_delegate(get)
