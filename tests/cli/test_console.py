"""The ``s3kv`` console script ends its process itself (s3kv.cli.console): nothing it
printed is lost, its exit code is the command's, and it waits for a thread still at work.

Every CLI test runs real processes through it (``python -m s3kv.cli``); these hold what
ending the process early could break: output larger than a pipe holds, a reader that
stops early, an error's JSON, a thread that has not finished.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
"""As a console script runs: its output buffered (a flush it missed would lose the tail)."""
NAMESPACE = ["--model", "m", "--tokens-per-hash", "16", "--dtype", "bfloat16",
             "--group", "16:model.layers.0.self_attn.attn"]


def _hashes(count: int) -> list[str]:
    return [arg for _ in range(count) for arg in ("--block-hash", secrets.token_hex(32))]


def test_output_larger_than_a_pipe_holds_arrives_whole() -> None:
    hashes = _hashes(3000)
    done = subprocess.run([sys.executable, "-m", "s3kv.cli", "key", *NAMESPACE, *hashes,
                           "--json"], capture_output=True, text=True, timeout=60, env=BUFFERED)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) > 512 << 10  # far more than a pipe's 64 KiB
    assert done.stdout.endswith("}\n")  # to its last byte
    doc = json.loads(done.stdout)
    assert len(doc["block_keys"]) == 3000, list(doc)
    assert done.stderr == ""
    # The same as lines, each written on its own (a buffer's tail is what an early end
    # would lose):
    done = subprocess.run([sys.executable, "-m", "s3kv.cli", "key", *NAMESPACE, *hashes],
                          capture_output=True, text=True, timeout=60, env=BUFFERED)
    assert done.returncode == 0, done.stderr
    keys = [line for line in done.stdout.splitlines() if line.rstrip().endswith(".bin")]
    assert len(keys) == 3000 and done.stdout.endswith("\n"), done.stdout[-300:]


def test_an_errors_json_and_exit_code_arrive() -> None:
    done = subprocess.run([sys.executable, "-m", "s3kv.cli", "key", *NAMESPACE,
                           "--block-hash", "not-hex", "--json"],
                          capture_output=True, text=True, timeout=60, env=BUFFERED)
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert (doc["ok"], doc["error"]["code"]) == (False, 2), doc
    assert "not-hex" in done.stderr


def test_a_reader_that_stops_early_ends_it_quietly() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "s3kv.cli", "key", *NAMESPACE,
                             *_hashes(3000)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=BUFFERED)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.read(100)
    proc.stdout.close()  # as `s3kv key ... | head -c 100` does
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 0
    assert first.startswith(b"namespace")
    assert err == b""


def test_a_reader_gone_before_the_first_write_ends_it_quietly() -> None:
    # The whole output still in the buffer when the command returns: the first write is
    # the console's last flush (Python itself would exit 120, "Exception ignored").
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "s3kv.cli", "key", *NAMESPACE,
                               *_hashes(3)], stdout=write_end, stderr=subprocess.PIPE,
                              timeout=60, env=BUFFERED)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, b"")


def test_a_thread_still_at_work_is_waited_for(tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    script = f"""
import sys, threading, time
import s3kv.cli as cli

def command():
    def work():
        time.sleep(0.5)
        open({str(marker)!r}, "w").write("done")
    threading.Thread(target=work).start()  # not a daemon: the process waits for it
    print("started")
    return 3

cli.main = command
cli.console()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env=BUFFERED)
    assert (done.returncode, done.stdout) == (3, "started\n"), done.stderr
    assert marker.read_text() == "done"
