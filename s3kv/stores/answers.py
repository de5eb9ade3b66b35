"""What an S3 answer must hold before s3kv believes it.

A 200 is not enough: a web console, a proxy or a captive portal answers 200 too. A GET
or HEAD from S3 carries an ETag and is no HTML page; a PUT's answer carries an ETag (and,
where the store echoes one, the checksum that was sent); an object is never larger than
asked for. Both data paths check here; listing pages in :mod:`.pages`.
"""

from __future__ import annotations

from typing import Any

from s3kv.errors import SizeMismatchError, StoreError
from s3kv.stores.base import PutOptions
from s3kv.stores.errors import not_s3


def oversized(where: str, size: int, max_bytes: int) -> SizeMismatchError:
    """An object larger than any block it could be: not read."""
    return SizeMismatchError(
        f"GET {where}: object is {size} bytes, more than the {max_bytes} expected (a "
        "foreign or damaged object under a block key); not read"
    )


def check_answer(operation: str, where: str, endpoint: str, resp: dict[str, Any]) -> None:
    """A GET or HEAD answer from S3 has an ETag and is no web page."""
    if not resp.get("ETag"):
        raise not_s3(operation, where, endpoint, "200 without an ETag")
    if str(resp.get("ContentType", "")).lower().startswith("text/html"):
        raise not_s3(operation, where, endpoint, "200 with an HTML page")


def check_stored(
    operation: str,
    where: str,
    endpoint: str,
    etag: str | None,
    options: PutOptions,
    headers: dict[str, Any],
) -> None:
    """A PUT's answer must say the object was written: an ETag, and the checksum we sent
    if the store echoes one (AWS and MinIO do; Ceph RGW 16 echoes none, so there only
    the ETag is checked)."""
    if not etag:
        raise not_s3(operation, where, endpoint, "200 without an ETag")
    ours = options.checksum
    if ours is None:
        return
    echoed = headers.get(ours.s3_parameter) or headers.get(f"x-amz-checksum-{ours.algorithm}")
    if echoed and echoed != ours.value:
        raise StoreError(
            f"{operation} {where}: the store recorded {ours.algorithm} {echoed}, not the "
            f"{ours.value} sent: the bytes changed on the way; run 's3kv verify --deep'"
        )
