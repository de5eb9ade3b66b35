"""How a load job is split: enough ranged parts to fill the connections, none too small,
none larger than one of awscrt's parts (each request's body reaches Python whole)."""

from __future__ import annotations

import pytest

from s3kv.stores.crt import MAX_REQUEST_BYTES
from s3kv.stores.crt_get import MIN_PART_BYTES, plan

pytestmark = pytest.mark.unit
MiB = 1 << 20


@pytest.mark.parametrize(
    ("count", "size", "parts", "inflight"),
    [
        (192, 2 * MiB, 1, 44),  # many small blocks: whole, one per connection
        (48, 8 * MiB, 1, 44),  # as many blocks as connections: whole
        (12, 32 * MiB, 4, 16),  # few large blocks: 48 parts of 8 MiB fill 44 connections
        (2, 32 * MiB, 8, 16),  # never below MIN_PART_BYTES (4 MiB)
        (1, 3 * MiB, 1, 44),  # too small to split
        (32, 32 * MiB, 4, 16),  # a prompt's 32 MiB blocks: 8 MiB a request, never 32
        (200, 96 * MiB, 12, 16),  # never above one awscrt part (8 MiB)
    ],
)
def test_a_job_fills_the_connections_in_parts_of_at_least_4_mib(
    count: int, size: int, parts: int, inflight: int
) -> None:
    got = plan(count, size, 16, 44, MAX_REQUEST_BYTES)
    assert got == (parts, inflight)
    assert size // got[0] >= MIN_PART_BYTES or got[0] == 1
    assert -(-size // got[0]) <= MAX_REQUEST_BYTES
