"""What boto3 and a directory raise, in s3kv's tree: the one place that catches them.

An S3 error answer goes to the one table (:func:`s3kv.stores.rules.error_for`); this
module only unpacks botocore's exceptions (and urllib3's beneath them, and the OS errors
of a directory) and names the endpoint, the proxy or the setting to change.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from contextlib import contextmanager

from botocore import exceptions as bx
from botocore.parsers import ResponseParserError
from urllib3 import exceptions as ux

from s3kv.errors import (
    AccessDeniedError,
    ObjectNotFoundError,
    S3KVError,
    SettingsError,
    StoreError,
    TransientStoreError,
)
from s3kv.settings import display_url
from s3kv.stores.network import Network
from s3kv.stores.rules import TIMEOUT_HINT, error_for, not_s3


def status_of(exc: bx.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def code_of(exc: bx.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@contextmanager
def translated(
    operation: str, where: str, network: Network, region: str | None = None
) -> Iterator[None]:
    """Run a boto3 call; re-raise its failure as an s3kv error naming what and where."""
    try:
        yield
    except bx.ClientError as exc:
        raise from_client_error(exc, operation, where, region) from exc
    except ResponseParserError as exc:
        raise not_s3(operation, where, network.endpoint, "a body that is not S3's XML") from exc
    except bx.NoCredentialsError:
        raise AccessDeniedError(
            f"{operation} {where}: no AWS credentials found; set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, pick a profile with --profile/AWS_PROFILE, or run "
            "where an instance role is available"
        ) from None
    except bx.SSLError as exc:
        raise network.tls_failed(operation, where, short(exc)) from exc
    except bx.ProxyConnectionError as exc:
        raise network.unreachable(operation, where, short(exc)) from exc
    except (bx.ReadTimeoutError, bx.ConnectTimeoutError, TimeoutError) as exc:
        raise TransientStoreError(
            f"{operation} {where}: {short(exc)}{network.via}; {TIMEOUT_HINT}"
        ) from exc
    except bx.EndpointConnectionError as exc:
        raise network.unreachable(operation, where, short(exc)) from exc
    except (
        bx.ConnectionClosedError,
        bx.ResponseStreamingError,
        bx.IncompleteReadError,
        bx.HTTPClientError,
        ux.HTTPError,
        ConnectionError,
    ) as exc:
        raise TransientStoreError(
            f"{operation} {where}: connection failed{network.via}: {short(exc)}"
        ) from exc
    except bx.BotoCoreError as exc:  # never a raw botocore error out of the library
        raise StoreError(f"{operation} {where}: {short(exc)}") from exc


def from_client_error(
    exc: bx.ClientError, operation: str, where: str, region: str | None = None
) -> StoreError:
    error = exc.response.get("Error", {})
    meta = exc.response.get("ResponseMetadata", {})
    return error_for(
        operation,
        where,
        status=status_of(exc),
        code=code_of(exc),
        message=str(error.get("Message") or ""),
        headers=(meta.get("HTTPHeaders") or {}).items(),
        fields={k: str(v) for k, v in error.items()},
        region=region,
    )


@contextmanager
def client_setup() -> Iterator[None]:
    """Build a boto3 session or client; what botocore refuses there is a settings error."""
    try:
        yield
    except S3KVError:
        raise
    except bx.ProfileNotFound as exc:
        raise SettingsError(
            f"{short(exc)}; name a profile of ~/.aws/config or ~/.aws/credentials with "
            "--profile/AWS_PROFILE, or unset it to use the default credential chain"
        ) from None
    except (bx.BotoCoreError, ValueError) as exc:
        raise SettingsError(
            f"the S3 client refused the settings: {short(exc)}; check --endpoint-url, "
            "--region and --profile (or their S3KV_*/AWS_* variables)"
        ) from None


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


def short(exc: BaseException) -> str:
    """A foreign error's text, with every URL in it cut to scheme, host, port and path."""
    text = _URL.sub(lambda m: display_url(m.group(0)), str(exc))
    return text if len(text) < 200 else text[:197] + "..."
