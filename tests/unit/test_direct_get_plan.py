"""How a load job is split: enough ranged parts to fill the connections, none too small."""

from __future__ import annotations

import pytest

from s3kv import S3Settings
from s3kv.stores.direct import MIN_PART_BYTES, Direct
from s3kv.stores.endpoint import DataEndpoint

pytestmark = pytest.mark.unit
MiB = 1 << 20


def gets(connections: int) -> Direct:
    endpoint = DataEndpoint(url="http://127.0.0.1:9", tls=False, host="127.0.0.1:9",
                            hostname="127.0.0.1", path="/b", region="us-east-1")
    return Direct(endpoint, None, S3Settings(), connections=connections)


@pytest.mark.parametrize(
    ("count", "size", "parts", "inflight"),
    [
        (192, 2 * MiB, 1, 44),  # many small blocks: whole, one per connection
        (48, 8 * MiB, 1, 44),  # as many blocks as connections: whole
        (12, 32 * MiB, 4, 16),  # few large blocks: 48 parts of 8 MiB fill 44 connections
        (2, 32 * MiB, 8, 16),  # never below MIN_PART_BYTES (4 MiB)
        (1, 3 * MiB, 1, 44),  # too small to split
    ],
)
def test_a_job_fills_the_connections_in_parts_of_at_least_4_mib(
    count: int, size: int, parts: int, inflight: int
) -> None:
    got = gets(44).plan(count, size, window=16)
    assert got == (parts, inflight)
    assert size // got[0] >= MIN_PART_BYTES or got[0] == 1
