"""Translate botocore, urllib3 and OS errors into s3kv's tree: the one place that does."""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from email.utils import parsedate_to_datetime

from botocore import exceptions as bx
from botocore.parsers import ResponseParserError
from urllib3 import exceptions as ux

from s3kv.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ObjectNotFoundError,
    SettingsError,
    StoreError,
    TransientStoreError,
    UnsupportedByStoreError,
)
from s3kv.settings import display_url

NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
ALREADY_EXISTS = {"PreconditionFailed", "412"}
TRANSIENT = {
    "SlowDown",
    "503",
    "500",
    "502",
    "504",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "Throttling",
    "ThrottlingException",
    "TooManyRequests",
    "429",
    "ConditionalRequestConflict",
    "409",
    "OperationAborted",
}
NOT_IMPLEMENTED = {"NotImplemented", "501"}
DENIED = {
    "AccessDenied",
    "403",
    "Forbidden",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "AllAccessDisabled",
}


def error_code(exc: bx.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "")) or str(
        exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
    )


def is_already_exists(exc: bx.ClientError) -> bool:
    return error_code(exc) in ALREADY_EXISTS


TIMEOUT_HINT = (
    "the endpoint accepted no connection or sent no answer within the connect and read "
    "timeouts; check --endpoint-url, or raise S3KV_CONNECT_TIMEOUT/S3KV_READ_TIMEOUT (seconds)"
)


def no_answer(operation: str, where: str, endpoint: str, seconds: float) -> TransientStoreError:
    """A request the endpoint never answered: name the endpoint and the settings to change."""
    return TransientStoreError(
        f"{operation} {where}: no answer from {display_url(endpoint)} within {seconds:.1f}s; "
        "check --endpoint-url, or raise S3KV_CONNECT_TIMEOUT/S3KV_READ_TIMEOUT (seconds)"
    )


def not_s3(operation: str, where: str, endpoint: str, what: str) -> TransientStoreError:
    """An answer no S3 store gives (an HTML page or an empty body with 200, no ETag): a
    console port, a proxy or a captive portal. Retried, since a proxy may recover."""
    return TransientStoreError(
        f"{operation} {where}: {display_url(endpoint)} answered {what}: not an S3 answer (a "
        "web console, proxy or captive portal at that address?); check --endpoint-url"
    )


def not_implemented(operation: str, where: str, detail: str) -> UnsupportedByStoreError:
    """501: the store lacks a feature. Never retried: asking again gets the same answer."""
    return UnsupportedByStoreError(
        f"{operation} {where}: the store answered 501 NotImplemented ({detail}); it may not "
        "support conditional writes (If-None-Match: *, which s3kv's create-only writes "
        "need) or object tags: set S3KV_TAG_BLOCKS=false for a store without tags, and "
        "use a store version that supports If-None-Match on PUT"
    )


def retry_after(headers: Iterable[tuple[str, str]]) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date), or None."""
    for name, value in headers:
        if name.lower() != "retry-after":
            continue
        value = value.strip()
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return None


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


def tls_failed(what: str, endpoint: str, detail: str) -> StoreError:
    """A failed TLS handshake. When the port answered in plain HTTP, say that (the CA
    advice would send the user the wrong way); else advise on trusting the server's CA."""
    if any(sign in detail for sign in PLAIN_HTTP_SIGNS):
        shown = display_url(endpoint) if "://" in endpoint else "the endpoint"
        plain = shown.replace("https://", "http://", 1) if shown.startswith("https://") else ""
        fix = f"use {plain} (or the store's TLS port)" if plain else "use http:// or a TLS port"
        return StoreError(
            f"{what}: {shown} answered in plain HTTP, not TLS: the URL says https:// but the "
            f"port speaks HTTP; {fix} in --endpoint-url"
        )
    return StoreError(
        f"{what}: TLS verification failed ({detail}); pass the server's CA with "
        "--ca-bundle/S3KV_CA_BUNDLE (or --no-verify-tls for testing)"
    )


@contextmanager
def translated(operation: str, where: str, endpoint: str = "the endpoint") -> Iterator[None]:
    """Run a boto3 call; re-raise its failure as an s3kv error naming what and where."""
    try:
        yield
    except bx.ClientError as exc:
        raise from_client_error(exc, operation, where) from exc
    except ResponseParserError as exc:
        raise not_s3(operation, where, endpoint, "a body that is not S3's XML") from exc
    except bx.NoCredentialsError:
        raise AccessDeniedError(
            f"{operation} {where}: no AWS credentials found; set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, pick a profile with --profile/AWS_PROFILE, or run "
            "where an instance role is available"
        ) from None
    except bx.SSLError as exc:
        raise tls_failed(f"{operation} {where}", endpoint, _short(exc)) from exc
    except (bx.ReadTimeoutError, bx.ConnectTimeoutError, TimeoutError) as exc:
        raise TransientStoreError(f"{operation} {where}: {_short(exc)}; {TIMEOUT_HINT}") from exc
    except (
        bx.EndpointConnectionError,
        bx.ConnectionClosedError,
        bx.ResponseStreamingError,
        bx.HTTPClientError,
        ux.HTTPError,
        ConnectionError,
    ) as exc:
        raise TransientStoreError(f"{operation} {where}: connection failed: {_short(exc)}") from exc


@contextmanager
def client_setup() -> Iterator[None]:
    """Build a boto3 session or client; what botocore refuses there is a settings error."""
    try:
        yield
    except bx.ProfileNotFound as exc:
        raise SettingsError(
            f"{_short(exc)}; name a profile of ~/.aws/config or ~/.aws/credentials with "
            "--profile/AWS_PROFILE, or unset it to use the default credential chain"
        ) from None
    except (bx.BotoCoreError, ValueError) as exc:
        raise SettingsError(
            f"the S3 client refused the settings: {_short(exc)}; check --endpoint-url, "
            "--region and --profile (or their S3KV_*/AWS_* variables)"
        ) from None


def from_client_error(exc: bx.ClientError, operation: str, where: str) -> StoreError:
    code = error_code(exc)
    message = exc.response.get("Error", {}).get("Message") or code
    if code in NOT_FOUND:
        return ObjectNotFoundError(f"{operation} {where}: no such object")
    if code == "NoSuchBucket":
        return BucketNotFoundError(
            f"{operation} {where}: the bucket does not exist; create it first "
            "(see terraform/) or check the bucket name and --endpoint-url"
        )
    if code in NOT_IMPLEMENTED:
        return not_implemented(operation, where, message)
    if code in DENIED:
        return AccessDeniedError(
            f"{operation} {where}: access denied ({code}); check the credentials and that "
            "their policy grants this operation (terraform/ has writer and reader policies)"
        )
    if code in TRANSIENT:
        headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        return TransientStoreError(
            f"{operation} {where}: {code}: {message}", retry_after=retry_after(headers.items())
        )
    return StoreError(f"{operation} {where}: {code}: {message}")


def from_os_error(exc: OSError, operation: str, where: str) -> StoreError:
    if exc.errno == errno.ENOENT:
        return ObjectNotFoundError(f"{operation} {where}: no such file")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return AccessDeniedError(f"{operation} {where}: permission denied")
    if exc.errno == errno.ENOSPC:
        return StoreError(f"{operation} {where}: no space left on device; free space or gc")
    if exc.errno == errno.ENAMETOOLONG:
        return StoreError(
            f"{operation} {where}: a file or folder name is too long for this filesystem "
            "(most allow 255 bytes per name)"
        )
    if exc.errno == errno.ENOTDIR:
        return StoreError(
            f"{operation} {where}: a file is in the way of a folder (not a directory); "
            "move it aside"
        )
    if exc.errno == errno.ELOOP:
        return StoreError(
            f"{operation} {where}: a symlink is in the way of a folder; s3kv writes only "
            "under the destination's real path and never follows a symlink inside it"
        )
    return StoreError(f"{operation} {where}: {exc.strerror or exc}")


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def _short(exc: BaseException) -> str:
    """A foreign error's text, with every URL in it cut to scheme, host, port and path."""
    text = _URL.sub(lambda m: display_url(m.group(0)), str(exc))
    return text if len(text) < 200 else text[:197] + "..."
