"""The boto3 client of the S3 store: built from s3kv's settings, with its own retries off.

botocore's retries are off (:mod:`s3kv.retry` owns them), region redirects too (the error
names the region, as awscrt's block requests do), and, on custom endpoints, a copy's
source conditions go out under the names Ceph RGW reads as well.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.utils import parse_timestamp

from s3kv.settings import S3Settings
from s3kv.stores.endpoint import addressing_style, configured_endpoint
from s3kv.stores.errors import client_setup
from s3kv.stores.network import Network, network_for
from s3kv.stores.trace import trace_botocore, trace_enabled


def make_client(
    settings: S3Settings, *, session: Any = None, network: Network | None = None
) -> Any:
    """A boto3 S3 client configured from ``settings`` (on ``network``: its CA bundle)."""
    with client_setup():
        if session is None:
            session = new_session(settings)
        endpoint = configured_endpoint(session, settings)
        if network is None:
            network = network_for(endpoint, settings, session)
        return _make_client(settings, session, endpoint, network)


def new_session(settings: S3Settings) -> Any:
    """A boto3 session; ``settings.profile`` is explicit (its keys win over the
    environment's), while ``AWS_PROFILE`` stays boto3's own default (the environment's
    keys win over it), exactly as botocore resolves them."""
    with client_setup():
        core = botocore.session.get_session()
        # A listing's every LastModified through dateutil costs ~60 us a key, half of a
        # 1,000-key page's time: ISO 8601 with its zone goes through the standard library.
        core.get_component("response_parser_factory").set_parser_defaults(
            timestamp_parser=parse_time
        )
        return boto3.session.Session(
            profile_name=settings.profile, region_name=settings.region, botocore_session=core
        )


def parse_time(value: Any) -> datetime:
    """A response's timestamp as botocore's own parser gives it (timezone-aware), ISO
    8601 with a zone (listings) parsed by :meth:`datetime.fromisoformat`; anything else
    (HTTP dates, epoch seconds, no zone) by botocore."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is not None:
                return parsed
    when: datetime = parse_timestamp(value)
    return when


def _make_client(settings: S3Settings, session: Any, endpoint: str | None, network: Network) -> Any:
    config = Config(
        max_pool_connections=settings.concurrency + 4,
        connect_timeout=settings.connect_timeout_seconds,
        read_timeout=settings.read_timeout_seconds,
        retries={"total_max_attempts": 1},  # s3kv.retry owns retries (see module doc)
        s3={
            "addressing_style": addressing_style(settings, endpoint),
            # s3kv sends its own checksum header; sha256-signing every body over plain
            # HTTP would double the client's CPU per byte for no extra safety.
            "payload_signing_enabled": False,
        },
        request_checksum_calculation=settings.checksum_calculation,
        response_checksum_validation=settings.checksum_calculation,
        # Bodies are memoryviews of the caller's buffers: botocore's validator only
        # knows bytes and files, while http.client sends any buffer as is.
        parameter_validation=False,
        tcp_keepalive=True,
        # botocore reads a profile's proxy_ca_bundle but applies only the client's own
        proxies_config=(
            {"proxy_ca_bundle": network.proxy_ca_bundle} if network.proxy_ca_bundle else None
        ),
    )
    verify: bool | str = network.ca_bundle or settings.verify_tls
    kwargs: dict[str, Any] = {}
    if settings.access_key_id is not None and settings.secret_access_key is not None:
        kwargs["aws_access_key_id"] = settings.access_key_id
        kwargs["aws_secret_access_key"] = settings.secret_access_key.get_secret_value()
        if settings.session_token is not None:
            kwargs["aws_session_token"] = settings.session_token.get_secret_value()
    client = session.client(
        "s3", endpoint_url=endpoint, config=config, verify=verify, **kwargs
    )
    if trace_enabled():
        client.meta.events.register("before-parameter-build.s3", trace_botocore)
    # botocore would resend a request answered "the bucket is in another region" there;
    # awscrt's block requests would not, so neither does the control plane: the error
    # names the region (s3kv.stores.rules), one behaviour for every request.
    client.meta.events.register("before-call.s3", _no_region_redirect)
    return client


def _no_region_redirect(context: dict[str, Any], **_: Any) -> None:
    redirect = context.get("s3_redirect")
    if isinstance(redirect, dict):
        redirect["redirected"] = True


_RGW_COPY_CONDITIONS = {
    "x-amz-copy-source-if-match": "x-amz-copy-if-match",
    "x-amz-copy-source-if-unmodified-since": "x-amz-copy-if-unmodified-since",
}


def mirror_copy_conditions(client: Any) -> None:
    """Also send a copy's source conditions under the names Ceph RGW reads.

    RGW (16 to at least 18) reads ``x-amz-copy-if-match`` and ``x-amz-copy-if-unmodified-
    since``, and ignores AWS's ``x-amz-copy-source-*`` names: without this a renewal on
    RGW would copy whatever object is there. Only for custom endpoints; registered once.
    """
    client.meta.events.register(
        "before-sign.s3.CopyObject", _copy_conditions_for_rgw, unique_id="s3kv-rgw-copy-if"
    )


def _copy_conditions_for_rgw(request: Any, **_: Any) -> None:
    for aws_name, rgw_name in _RGW_COPY_CONDITIONS.items():
        value = request.headers.get(aws_name)
        if value is not None:
            request.headers[rgw_name] = value
