"""``s3kv ls`` on a terminal: as wide as it (100 columns here), human sizes and ages; into
a pipe or a file nothing is cut; --json in full."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import pytest

from s3kv import S3Settings
from s3kv.cli.ls_table import age_text, ranks_text, render
from s3kv.naming.keys import KeyMapper, make_offload_key
from s3kv.naming.namespace import Namespace
from s3kv.ops.demo import write_cache
from s3kv.ops.inventory import inventory
from s3kv.ops.sync import sync
from s3kv.stores import LocalStore, PutOptions
from s3kv.units import elide_middle, format_age
from tests.cli.terminal import on_a_terminal

# Among the slowest tests of the suite, needed at that cost: each runs the command as a
# user does, one process per command (interpreter and imports first), and checks the exit
# code and output. A check of the library's behaviour belongs in tests/functional instead.
pytestmark = pytest.mark.integration

LONG_MODEL = "organisation-with-a-long-name/" + "a-fine-tuned-model-name-x" + "y" * 5
assert len(LONG_MODEL) == 60


@pytest.fixture
def cache(
    moto_server: str, tmp_path: Path
) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """Push tmp_path/"cache" to a bucket named like the demo's; yield an ``ls`` of it."""
    bucket = f"s3kv-demo-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=bucket)
    url, settings = f"s3://{bucket}/kv", S3Settings.resolve(endpoint_url=moto_server)

    def ls(*args: str, tty: bool = False) -> subprocess.CompletedProcess[str]:
        report = sync(tmp_path / "cache", url, settings=settings)
        assert not report.failed
        argv = [sys.executable, "-m", "s3kv.cli", "ls", url, "--endpoint-url", moto_server, *args]
        if tty:
            return on_a_terminal(argv, columns=100)
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    yield ls


def write_namespace(root: Path, model: str, blocks: int, *, ranks: int = 1) -> Namespace:
    ns = Namespace(model_name=model, tokens_per_hash=16, dtype="bfloat16", tp_size=ranks)
    store = LocalStore(root)
    store.put(KeyMapper(ns).config_key(), ns.manifest_bytes(), PutOptions())
    for rank in range(ranks):
        keys = KeyMapper(ns.for_rank(rank))
        for i in range(blocks):
            key = make_offload_key(i.to_bytes(4, "big") * 8, 0)
            store.put(keys.key_for(key), b"\x00" * 4096, PutOptions())
    return ns


def test_ls_fits_100_columns_for_the_demo_cache(tmp_path: Path, cache) -> None:
    ns = write_cache(tmp_path / "cache", 3)
    out = cache(tty=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(map(len, lines + out.stderr.splitlines())) <= 100, out.stdout
    assert lines[0].split() == [
        "FOLDER",
        "DTYPE",
        "TP/PP/PCP/DCP",
        "RANKS",
        "BLOCKS",
        "SIZE",
        "AGE",
    ]
    # the demo's folder fits whole (unless its blocks were written across a second, and
    # the age is a range: 1s..0s takes 3 columns more); size and age are human
    folder, *row = lines[1].split()
    assert row[:6] == ["bfloat16", "1/1/1/1", "0", "3", "6.0", "MiB"]
    # written just now: seconds old (a loaded box has taken 10 s between the write and ls)
    if folder != ns.folder:
        assert "..." in folder and re.fullmatch(r"\d+s\.\.\d+s", row[6]), lines[1]
    else:
        assert re.fullmatch(r"\d+s", row[6]) and int(row[6][:-1]) < 60, lines[1]
    # and its block size, below (vLLM's fs tier wrote the manifest: nothing recorded)
    assert lines[-3].split() == ["WRITTEN", "BLOCK", "SIZE", "CREATED", "(UTC)", "S3KV", "VLLM"]
    assert lines[-2].split() == [folder, "2.0", "MiB", "-", "-", "-"]


def test_ls_elides_the_middle_of_a_60_character_model_folder(tmp_path: Path, cache) -> None:
    ns = write_namespace(tmp_path / "cache", LONG_MODEL, 3, ranks=4)
    write_namespace(tmp_path / "cache", "Qwen/Qwen3-0.6B", 300)
    out = cache(tty=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(map(len, lines + out.stderr.splitlines())) <= 100, out.stdout
    long_row = next(line for line in lines if line.startswith("organisation"))
    folder, *rest = long_row.split()
    assert folder != ns.folder and "..." in folder
    start, end = folder.split("...")
    assert ns.folder.startswith(start) and ns.folder.endswith(end)
    assert ns.folder.endswith(end) and len(end) >= 12  # the digest survives
    assert rest[:5] == ["bfloat16", "4/1/1/1", "0-3", "12", "48.0"]
    qwen_row = next(line for line in lines if line.startswith("Qwen"))
    assert qwen_row.split()[4:7] == ["300", "1.2", "MiB"]  # 300 x 4 KiB
    # into a pipe (a file, a script) no name is cut, in any of the tables
    piped = cache().stdout.splitlines()
    assert all("..." not in line for line in piped)
    assert sum(line.startswith(ns.folder + " ") for line in piped) == 3
    # --json is unabridged: full folder, model and byte counts
    rows = {r["model"]: r for r in json.loads(cache("--json").stdout)["namespaces"]}
    assert rows[LONG_MODEL]["folder"] == ns.folder
    assert rows[LONG_MODEL]["bytes"] == 12 * 4096
    assert rows[LONG_MODEL]["ranks"] == [0, 1, 2, 3]


def test_ls_notes_a_namespace_without_manifest_below_the_table(tmp_path: Path) -> None:
    ns = write_namespace(tmp_path, "Qwen/Qwen3-0.6B", 2)
    os.remove(tmp_path / KeyMapper(ns).config_key())
    lines = render(inventory(str(tmp_path)))  # a directory: no server needed
    assert max(map(len, lines)) <= 100
    assert lines[-1] == f"{ns.folder}: no manifest (model, dtype and sizes read from keys)"


def test_ages_ranks_and_elision() -> None:
    assert [format_age(s) for s in (-5, 0, 89, 600, 7200, 3 * 86400, 60 * 86400)] == [
        "0s", "0s", "89s", "10m", "2h", "3d", "9w",
    ]  # fmt: skip
    assert ranks_text((0, 1, 2, 3, 6, 8, 9)) == "0-3,6,8-9"
    assert ranks_text(()) == "-"
    assert elide_middle("abcdefghij", 7) == "ab...ij"
    assert elide_middle("abc", 7) == "abc"
    now = datetime(2026, 1, 10, tzinfo=timezone.utc)
    ns = next(iter(_one_namespace(now - timedelta(days=3), now - timedelta(minutes=2))))
    assert age_text(ns, now) == "3d..2m"


def _one_namespace(oldest: datetime, newest: datetime):  # type: ignore[no-untyped-def]
    from s3kv.ops.inventory import NamespaceSummary

    yield NamespaceSummary(
        prefix="", folder="f", model="m", dtype="bfloat16", tp_size=1, pp_size=1,
        pcp_size=1, dcp_size=1, ranks=(0,), blocks=1, bytes=1, oldest=oldest, newest=newest,
        manifest=True,
    )  # fmt: skip
