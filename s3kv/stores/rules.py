"""The rules every S3 request of s3kv follows, whichever client sends it.

s3kv speaks S3 through two clients: awscrt carries every block GET, PUT and HEAD
(:mod:`.crt`), boto3 the control plane (listings, deletes, copies, tags, multipart
uploads) and the whole ``data_path=botocore`` store (:mod:`.s3`). Both follow this module,
and no other module maps an S3 error code:

* **What an answer means** (:func:`error_for`): one table from S3's error codes (and,
  where an answer has no body, its HTTP status and headers) to s3kv's exception tree,
  each entry with the fix: a skewed clock names the clock, a bucket in another region
  names that region, expired credentials say so.
* **What an answer must hold before it is believed**: an ETag and no web page
  (:func:`check_found`), no more bytes than a block can have (:func:`oversized`), the
  checksum a PUT sent where the store echoes it, and the token a GET sent where the store
  echoes it (:class:`.echoes.Echoes`): a stale or foreign answer never counts as ours.
* **What a block write carries** (:mod:`.writing`): create-only or If-Match, the
  checksum header and s3kv's metadata.
* **How long one attempt may take** (:func:`attempt_seconds`): connect and read
  timeouts plus the body at the minimum rate. Retrying is :mod:`s3kv.retry`'s: an error
  is retried when it is a :class:`~s3kv.errors.TransientStoreError`.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from s3kv.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ClockSkewError,
    CustomerKeyError,
    ExpiredCredentialsError,
    ObjectNotFoundError,
    SizeMismatchError,
    StoreError,
    StoreFullError,
    TransientStoreError,
    UnsupportedByStoreError,
    WrongRegionError,
)
from s3kv.settings import S3Settings, display_url
from s3kv.stores.sse_c import KEY_REFUSED, key_refused

Headers = Iterable[tuple[str, str]]


class ConditionFailed(StoreError):
    """412: a condition of the request did not hold (``If-None-Match: *`` on an object
    that exists, ``If-Match`` on one that changed). Internal: callers turn it into
    "already present" or "changed"."""


class RangeNotSatisfiable(StoreError):
    """416: no byte of the range exists (every range of a 0-byte object). Internal."""


# -- what an answer means ---------------------------------------------------------------

_POLICY = "terraform/ has writer and reader policies"
_FULL = "the store is full; free space (s3kv gc) or add capacity; writes are not retried"
_BUSY = "the store is busy or failed for a moment; retried"


@dataclass(frozen=True, slots=True)
class Meaning:
    error: type[StoreError]
    text: str


CODES: Mapping[str, Meaning] = {
    "NoSuchKey": Meaning(ObjectNotFoundError, "no such object"),
    "NotFound": Meaning(ObjectNotFoundError, "no such object"),
    "NoSuchBucket": Meaning(
        BucketNotFoundError,
        "the bucket does not exist; create it first (see terraform/) or check the bucket "
        "name and --endpoint-url",
    ),
    "AccessDenied": Meaning(
        AccessDeniedError,
        f"access denied; check the credentials and that their policy grants this "
        f"operation ({_POLICY})",
    ),
    "AllAccessDisabled": Meaning(AccessDeniedError, "all access to this bucket is disabled"),
    "InvalidAccessKeyId": Meaning(
        AccessDeniedError,
        "the store knows no such access key; check AWS_ACCESS_KEY_ID or --profile, and "
        "that --endpoint-url is the store the key belongs to",
    ),
    "SignatureDoesNotMatch": Meaning(
        AccessDeniedError,
        "the request's signature does not match; check the secret key "
        "(AWS_SECRET_ACCESS_KEY or the profile's), or a proxy that rewrites requests",
    ),
    "ExpiredToken": Meaning(
        ExpiredCredentialsError,
        "the credentials have expired; refresh them (aws sso login, a new role session, "
        "or the instance or pod role) and run again",
    ),
    "TokenRefreshRequired": Meaning(
        ExpiredCredentialsError,
        "the session token must be refreshed; refresh the credentials and run again",
    ),
    "InvalidToken": Meaning(
        AccessDeniedError,
        "the session token is malformed or not valid; check AWS_SESSION_TOKEN or the "
        "profile's credentials",
    ),
    "RequestTimeTooSkewed": Meaning(ClockSkewError, ""),
    "RequestExpired": Meaning(ClockSkewError, ""),
    "PermanentRedirect": Meaning(WrongRegionError, ""),
    "AuthorizationHeaderMalformed": Meaning(WrongRegionError, ""),
    "IllegalLocationConstraintException": Meaning(WrongRegionError, ""),
    "NotImplemented": Meaning(UnsupportedByStoreError, ""),
    "PreconditionFailed": Meaning(ConditionFailed, "a condition of the request failed"),
    "InvalidRange": Meaning(RangeNotSatisfiable, "no such range"),
    "SlowDown": Meaning(TransientStoreError, _BUSY),
    "ServiceUnavailable": Meaning(TransientStoreError, _BUSY),
    "InternalError": Meaning(TransientStoreError, _BUSY),
    "RequestTimeout": Meaning(TransientStoreError, "the store timed out reading the request"),
    "Throttling": Meaning(TransientStoreError, _BUSY),
    "ThrottlingException": Meaning(TransientStoreError, _BUSY),
    "TooManyRequests": Meaning(TransientStoreError, _BUSY),
    "OperationAborted": Meaning(TransientStoreError, "a conflicting operation is under way"),
    "ConditionalRequestConflict": Meaning(
        TransientStoreError, "a conflicting conditional write is under way"
    ),
    "InsufficientStorage": Meaning(StoreFullError, _FULL),
    "XMinioStorageFull": Meaning(StoreFullError, _FULL),
    "QuotaExceeded": Meaning(
        StoreFullError,
        "the bucket or user quota is exceeded; raise the quota, or free space (s3kv gc)",
    ),
    "EntityTooLarge": Meaning(
        StoreError,
        "the object is larger than the store takes in one PUT; lower "
        "S3KV_MULTIPART_THRESHOLD_BYTES",
    ),
}
"""S3's error codes (``<Code>`` of an error body) and what they mean. Codes not here keep
the store's own words, as a :class:`StoreError`."""

STATUSES: Mapping[int, Meaning] = {
    301: Meaning(WrongRegionError, ""),
    307: Meaning(TransientStoreError, "the store redirected the request for a moment"),
    403: CODES["AccessDenied"],
    404: CODES["NoSuchKey"],
    409: CODES["ConditionalRequestConflict"],
    412: CODES["PreconditionFailed"],
    416: CODES["InvalidRange"],
    429: CODES["SlowDown"],
    501: CODES["NotImplemented"],
    507: CODES["InsufficientStorage"],
}
"""HTTP statuses, for answers without an error code (a HEAD has no body)."""

THROTTLES = frozenset({
    "SlowDown", "ServiceUnavailable", "InternalError", "Throttling", "ThrottlingException",
    "TooManyRequests", "RequestLimitExceeded", "RequestThrottled",
})
"""Codes that ask a client to slow down (so do 429, 500 and 503 without a code): the
store's :class:`s3kv.retry.Pacer` pauses every request to it."""

SKEW_LIMIT_SECONDS = 15 * 60
"""How far S3 lets a request's time be from its own clock."""


def error_for(
    operation: str,
    where: str,
    *,
    status: int,
    code: str = "",
    message: str = "",
    headers: Headers = (),
    fields: Mapping[str, str] | None = None,
    region: str | None = None,
) -> StoreError:
    """The s3kv error an S3 answer of ``status`` (>= 300) means.

    ``code`` and ``message`` are the error body's (``<Code>``, ``<Message>``; empty for a
    HEAD), ``fields`` the body's other fields (``Region``, ``ServerTime``), ``headers`` the
    answer's, ``region`` the region requests were signed for.
    """
    heads = {k.lower(): v for k, v in headers}
    fields = fields or {}
    if code.isdigit():  # botocore's stand-in for an answer without a body (a HEAD)
        code = ""
    bucket_region = heads.get("x-amz-bucket-region") or fields.get("Region")
    meaning = CODES.get(code) or (None if code else STATUSES.get(status))
    kind = meaning.error if meaning is not None else None
    if bucket_region and bucket_region != region and status in (301, 400, 403):
        kind = WrongRegionError  # S3 names the bucket's region on any of these
    if kind is None and status >= 500:
        kind = TransientStoreError
    if operation == "PUT" and status == 404 and not code:
        # S3 answers a write 404 only with a body (NoSuchBucket, or NoSuchKey to If-Match):
        # a bare 404 is another request's answer (a HEAD's, left on the connection).
        return TransientStoreError(
            f"{operation} {where}: HTTP 404 without an error code: not an S3 answer to a "
            "write (a stale answer on the connection; or not an S3 endpoint: check "
            "--endpoint-url); retried"
        )
    if operation in ("HEAD", "GET") and status == 412:
        # s3kv's reads carry no condition, so a 412 is another request's answer (a refused
        # create-only PUT's, left on a desynchronised connection).
        return TransientStoreError(
            f"{operation} {where}: HTTP 412 to a read without a condition: not an S3 "
            "answer to it (a stale answer on the connection); retried"
        )
    if status == 400 and key_refused(code, message):  # SSE-C: another key, or none
        return CustomerKeyError(f"{operation} {where}: {KEY_REFUSED} ({code}: {message})")
    if kind in (AccessDeniedError, None) and status in (400, 403):
        skew = _skew(heads, fields)
        if skew is not None and abs(skew) > SKEW_LIMIT_SECONDS:
            kind = ClockSkewError
    head = f"{operation} {where}"
    label = code or f"HTTP {status}"
    if kind is WrongRegionError:
        return WrongRegionError(f"{head}: {_region_text(bucket_region)}", region=bucket_region)
    if kind is ClockSkewError:
        return ClockSkewError(f"{head}: {label}: {_skew_text(_skew(heads, fields))}")
    if kind is UnsupportedByStoreError:
        return not_implemented(operation, where, message or label)
    if kind is TransientStoreError:
        text = meaning.text if meaning is not None else _BUSY
        asked = retry_after(heads.items())
        throttled = code in THROTTLES or (not code and status in (429, 500, 503))
        return TransientStoreError(
            f"{head}: {label}: {text}", retry_after=asked,
            throttled=throttled or asked is not None,
        )
    if kind is StoreFullError:
        return StoreFullError(f"{head}: {label}: {meaning.text if meaning else _FULL}")
    if kind is None or meaning is None:
        return StoreError(f"{head}: {label}" + (f": {message}" if message else ""))
    if kind is ObjectNotFoundError:
        return ObjectNotFoundError(f"{head}: {meaning.text}",
                                   named=fields.get("Key", "") if code else None)
    if kind in (ConditionFailed, RangeNotSatisfiable):
        return kind(f"{head}: {meaning.text}")
    return kind(f"{head}: {meaning.text} ({label})")


BUCKET_EXISTS = frozenset({"BucketAlreadyOwnedByYou", "BucketAlreadyExists"})
"""CreateBucket's codes for a bucket that is there already (the demo's set-up)."""


def gone_or_changed(code: str) -> bool:
    """Whether a DeleteObjects entry's error code says the object is gone, or no longer
    the one the delete was conditioned on (nothing was freed by this delete)."""
    meaning = CODES.get(code) or (STATUSES.get(int(code)) if code.isdigit() else None)
    return meaning is not None and meaning.error in (ObjectNotFoundError, ConditionFailed)


def _region_text(region: str | None) -> str:
    if region:
        return (
            f"the bucket is in region {region}; pass --region {region} (or set AWS_REGION "
            "or the profile's region)"
        )
    return (
        "the bucket is in another region than the one requests are signed for; pass its "
        "region with --region (aws s3api get-bucket-location names it)"
    )


def _skew(heads: Mapping[str, str], fields: Mapping[str, str]) -> float | None:
    """Seconds this host's clock is ahead of the store's, from the answer's ``Date``
    header (or the error body's ``ServerTime``), or None."""
    stamp = heads.get("date") or fields.get("ServerTime")
    if not stamp:
        return None
    try:
        when = parsedate_to_datetime(stamp).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        try:
            from datetime import datetime

            when = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return time.time() - when


def _skew_text(skew: float | None) -> str:
    fix = (
        "S3 refuses requests whose time is more than 15 minutes from its own; sync this "
        "host's clock (chrony, ntpd or systemd-timesyncd) and run again"
    )
    if skew is None:
        return f"this host's clock is too far from the store's: {fix}"
    direction = "ahead of" if skew > 0 else "behind"
    return f"this host's clock is {_duration(abs(skew))} {direction} the store's: {fix}"


def _duration(seconds: float) -> str:
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    if seconds >= 120:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} seconds"


def stale_answer(operation: str, where: str, what: str) -> TransientStoreError:
    """An answer that is not the one to this request (``what`` says how it shows): a
    stale answer left on a kept-alive connection, or a proxy answering for the store.
    Retried; the store's client retires the connections that carried it."""
    return TransientStoreError(
        f"{operation} {where}: {what}: not this request's answer (a stale answer on the "
        "connection, or a proxy that answers for the store); retried on a fresh connection"
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


_FIELD = re.compile(rb"<(Code|Message|Region|ServerTime|RequestTime|Key)>([^<]{0,2048})</\1>")


def error_fields(body: bytes) -> dict[str, str]:
    """The fields of an S3 error body (``<Code>``, ``<Message>``, ``<Region>``, the
    ``<Key>`` a 404 names...), their XML escapes undone."""
    found = _FIELD.finditer(body)
    return {m.group(1).decode(): html.unescape(m.group(2).decode("utf-8", "replace"))
            for m in found}


# -- what an answer must hold -------------------------------------------------------------

TIMEOUT_HINT = (
    "check --endpoint-url, or raise S3KV_CONNECT_TIMEOUT/S3KV_READ_TIMEOUT (seconds)"
)


def no_answer(operation: str, where: str, endpoint: str, seconds: float) -> TransientStoreError:
    """A request the endpoint never (or too slowly) answered: name it and the settings."""
    return TransientStoreError(
        f"{operation} {where}: no answer from {display_url(endpoint)} within {seconds:.1f}s; "
        f"{TIMEOUT_HINT}"
    )


def not_s3(operation: str, where: str, endpoint: str, what: str) -> TransientStoreError:
    """An answer no S3 store gives (an HTML page or an empty body with 200, no ETag): a
    console port, a proxy or a captive portal. Retried, since a proxy may recover."""
    return TransientStoreError(
        f"{operation} {where}: {display_url(endpoint)} answered {what}: not an S3 answer (a "
        "web console, proxy or captive portal at that address?); check --endpoint-url"
    )


def check_found(
    operation: str, where: str, endpoint: str, etag: str | None, content_type: str | None
) -> None:
    """A GET or HEAD answer from S3 has an ETag and is no web page."""
    if not etag:
        raise not_s3(operation, where, endpoint, "200 without an ETag")
    if content_type and content_type.lower().startswith("text/html"):
        raise not_s3(operation, where, endpoint, "200 with an HTML page")


def oversized(where: str, size: int, max_bytes: int) -> SizeMismatchError:
    """An object larger than any block it could be: not read."""
    return SizeMismatchError(
        f"GET {where}: object is {size} bytes, more than the {max_bytes} expected (a "
        "foreign or damaged object under a block key); not read"
    )


def size_mismatch(where: str, size: int, expected: int) -> SizeMismatchError:
    return SizeMismatchError(
        f"GET {where}: object is {size} bytes, expected {expected} (a truncated or foreign "
        "object, or a buffer of the wrong size)"
    )


def cut_short(operation: str, where: str, got: int, size: int) -> TransientStoreError:
    return TransientStoreError(
        f"{operation} {where}: connection closed after {got} of {size} bytes"
    )


_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def ranged_size(where: str, content_range: str | None, length: int, first: int) -> int:
    """The object's size from a GET's answer: ``Content-Range``'s total for a ranged
    answer, checked to be the range asked from ``first`` and as long as its
    ``Content-Length`` (else the answer is no well-framed one: retried); the length for
    a whole one."""
    if not content_range:
        return length
    found = _RANGE.fullmatch(content_range.strip())
    if found is None or found.group(3) == "*":
        raise TransientStoreError(f"GET {where}: a Content-Range S3 never sends "
                                  f"({content_range!r}); retried")
    start, end = int(found.group(1)), int(found.group(2))
    if start != first or end - start + 1 != length:
        raise TransientStoreError(
            f"GET {where}: an answer of {length} bytes for the range {start}-{end} of what "
            f"was asked from byte {first}: not framed as S3 frames it; retried"
        )
    return int(found.group(3))


# -- how long an attempt may take ----------------------------------------------------------


def attempt_seconds(settings: S3Settings, nbytes: int = 0) -> float:
    """The most one request may take: the connect and read timeouts, plus its body
    (``nbytes``, sent or received) at the minimum rate. A request still running then is
    cancelled and retried: a trickle ends like a stall."""
    return (
        settings.connect_timeout_seconds
        + settings.read_timeout_seconds
        + nbytes / settings.min_rate_bytes_per_second
    )
