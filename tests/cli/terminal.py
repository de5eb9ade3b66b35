"""Running a command with its stdout on a terminal, as a user at a shell does."""

from __future__ import annotations

import os
import pty
import subprocess


def on_a_terminal(argv: list[str], *, columns: int) -> subprocess.CompletedProcess[str]:
    """Run with stdout on a pseudo-terminal ``columns`` wide (COLUMNS, as shells set it)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns)}
    try:
        proc = subprocess.run(argv, stdout=follower, stderr=subprocess.PIPE, env=env,
                              text=True, timeout=120)  # fmt: skip
    finally:
        os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    text = out.decode().replace("\r\n", "\n")
    return subprocess.CompletedProcess(argv, proc.returncode, text, proc.stderr)
