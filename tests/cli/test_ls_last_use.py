"""``s3kv ls``: each namespace's bytes by time since last use (table and --json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from s3kv.cli.ls_table import render
from s3kv.naming.keys import KeyMapper
from s3kv.ops.inventory import LAST_USE_BUCKETS, inventory, last_use_bucket
from tests.cli.terminal import on_a_terminal
from tests.cli.test_ls import LONG_MODEL, write_namespace

pytestmark = pytest.mark.functional

HOUR, DAY = 3600, 86400


def _age(root: Path, ns, block: int, seconds: float, now: float) -> None:  # type: ignore[no-untyped-def]
    """Set one block's Last-Modified (a file's mtime) to ``seconds`` before ``now``."""
    from s3kv.naming.keys import make_offload_key

    key = KeyMapper(ns).key_for(make_offload_key(block.to_bytes(4, "big") * 8, 0))
    os.utime(root / key, (now - seconds, now - seconds))


def test_bytes_are_split_by_time_since_last_use(tmp_path: Path) -> None:
    now = time.time()
    ns = write_namespace(tmp_path, "Qwen/Qwen3-0.6B", 6)  # 6 blocks of 4 KiB
    for block, age in enumerate((60, 2 * HOUR, 3 * DAY, 3 * DAY, 30 * DAY, 400 * DAY)):
        _age(tmp_path, ns, block, age, now)
    inv = inventory(str(tmp_path), now=datetime.fromtimestamp(now, timezone.utc))
    (row,) = inv.namespaces
    assert row.bytes_by_last_use == {
        "within_1h": 4096, "1h_to_1d": 4096, "1d_to_7d": 2 * 4096, "over_7d": 2 * 4096,
    }  # fmt: skip
    assert sum(row.bytes_by_last_use.values()) == row.bytes
    lines = render(inv, now=datetime.fromtimestamp(now, timezone.utc))
    assert max(map(len, lines)) <= 100
    header = next(i for i, line in enumerate(lines) if line.startswith("LAST USED"))
    assert lines[header].split() == ["LAST", "USED", "<1h", "1h-1d", "1d-7d", ">7d"]
    assert lines[header + 1].split() == [
        ns.folder, "4.0", "KiB", "4.0", "KiB", "8.0", "KiB", "8.0", "KiB",
    ]  # fmt: skip


def test_the_buckets_edges() -> None:
    assert [last_use_bucket(s) for s in (0, HOUR - 1, HOUR, DAY, 7 * DAY, 1e12)] == [
        "within_1h", "within_1h", "1h_to_1d", "1d_to_7d", "over_7d", "over_7d",
    ]  # fmt: skip
    assert [name for name, _ in LAST_USE_BUCKETS][-1] == "over_7d"


def test_json_and_a_long_folder_fit(tmp_path: Path) -> None:
    write_namespace(tmp_path, LONG_MODEL, 2, ranks=2)
    out = subprocess.run(
        [sys.executable, "-m", "s3kv.cli", "ls", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["namespaces"]
    assert row["bytes_by_last_use"] == {
        "within_1h": 4 * 4096, "1h_to_1d": 0, "1d_to_7d": 0, "over_7d": 0,
    }  # fmt: skip
    text = on_a_terminal([sys.executable, "-m", "s3kv.cli", "ls", str(tmp_path)], columns=100)
    lines = [line for line in text.stdout.splitlines() if not line.startswith("ls: ")]
    assert max(map(len, lines)) <= 100  # (the summary names the path, however long)
    first, second, third = (line for line in lines if line.startswith("organisation"))
    assert first.split()[0] == second.split()[0] == third.split()[0]  # one cut in all
