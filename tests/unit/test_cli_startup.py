"""``s3kv --help`` and ``--version`` start without the library's heavy imports.

They once took 0.6-1.6 s because building the parser imported boto3, awscrt and pydantic
through every command module. Each command now imports the library in its ``run``; this
test fails if a module-level import brings one back. It measures no time (speed is for
benchmarks): docs/developers.md shows how to time start-up (``python -X importtime``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

HEAVY = ("boto3", "botocore", "awscrt", "pydantic", "s3kv.stores", "s3kv.naming.namespace")

PROBE = """
import contextlib, io, json, sys
from s3kv.cli import main
printed = io.StringIO()
for argv in %r:
    with contextlib.redirect_stdout(printed):
        try:
            assert main(argv) == 0, argv
        except SystemExit as exc:
            assert exc.code == 0, (argv, exc.code)
print(json.dumps(printed.getvalue()))
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in {h.split(".")[0] for h in %r}
                      and any(m == h or m.startswith(h + ".") for h in %r))))
"""


def _imported(argvs: list[list[str]], heavy: tuple[str, ...]) -> tuple[str, str]:
    """Which of ``heavy`` one process imported running ``argvs`` in turn, and what the
    commands printed."""
    printed, modules = subprocess.run(
        [sys.executable, "-c", PROBE % (argvs, heavy, heavy)],
        capture_output=True, text=True, check=True,
    ).stdout.split("\n", 1)
    return modules.strip(), json.loads(printed)


def test_help_and_version_import_no_heavy_module() -> None:
    out, _ = _imported([["--version"], ["--help"], ["gc", "--help"], ["rm", "--help"],
                        ["ls", "--help"]], HEAVY)
    assert out == "", f"--help/--version imported {out}"


def test_the_library_names_still_import_on_first_use() -> None:
    code = (
        "import sys, s3kv; assert 'boto3' not in sys.modules; "
        "from s3kv import Uploader, Namespace, S3Settings; "
        "assert 'boto3' in sys.modules and Uploader.__module__ == 's3kv.transfers.uploader'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_key_computes_keys_without_an_s3_client() -> None:
    # `s3kv key` is arithmetic on names: importing boto3 and awscrt (through the stores)
    # once doubled its time, for a command scripts may run once per block.
    key = ["key", "--model", "m", "--tokens-per-hash", "16", "--dtype", "bfloat16",
           "--group", "16:model.layers.0.self_attn.attn", "--block-hash", "ab" * 32,
           "s3://bucket/prefix"]
    out, printed = _imported([key], ("boto3", "botocore", "awscrt", "s3kv.stores"))
    assert printed.count(".bin") == 1, printed
    assert out == "", f"s3kv key imported {out}"
