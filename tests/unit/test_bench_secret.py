"""bench/lib/prompt_run.py's SSE-C secret: a 0600 file that lives as long as the run."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit


def test_the_secret_is_private_while_the_run_lives_and_gone_after_it(tmp_path: Path) -> None:
    program = (
        "import os, stat, sys\n"
        "from bench.lib.prompt_run import secret_file\n"
        "p = secret_file()\n"
        "print(p, oct(stat.S_IMODE(p.stat().st_mode)), len(p.read_bytes()), flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin"})
    path, mode, size = out.stdout.split()
    assert Path(path).parent == tmp_path and mode == oct(stat.S_IRUSR | stat.S_IWUSR)
    assert int(size) == 64  # 48 random bytes, base64
    assert not Path(path).exists()
