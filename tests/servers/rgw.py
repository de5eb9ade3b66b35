"""A throw-away single-node Ceph cluster with a RADOS Gateway (S3) on 127.0.0.1.

One monitor, one OSD on ``memstore`` (data lives in RAM, about 2x the stored
bytes) and one ``radosgw`` serving S3 over HTTP and HTTPS (self-signed
certificate for ``IP:127.0.0.1``).  Everything lives under one fresh temp
directory; every daemon runs in the foreground (``-f``) as our child and is
stopped by PID.  Logs are kept after ``stop()``; the data directory is removed
unless ``keep_data=True``; ``remove()`` deletes the rest.

Use from Python::

    from tests.servers.rgw import RGWServer
    with RGWServer() as rgw:
        s3 = boto3.client("s3", endpoint_url=rgw.https_endpoint,
                          verify=rgw.ca_bundle, region_name=rgw.region,
                          aws_access_key_id=rgw.access_key,
                          aws_secret_access_key=rgw.secret_key, config=...)

Use by hand::

    python -m tests.servers.rgw run      # start, print endpoints (JSON), wait for Ctrl-C
    python -m tests.servers.rgw start    # start detached, write a state file, print JSON
    python -m tests.servers.rgw stop     # stop what `start` started (reads the state file)

Install the packages first with ``scripts/rgw-install.sh``. The parts: ``rgw_process``
(host checks, errors, daemons by PID), ``rgw_cluster`` (the files a cluster is made of),
``rgw_server`` (``RGWServer``); this module is the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .rgw_process import (
    INSTALL_HINT,
    REQUIRED_COMMANDS,
    RGWError,
    RGWNotInstalled,
    RGWStartError,
    check_installed,
    free_ports,
    missing_commands,
    pid_alive,
    pid_cmdline,
    tail,
)
from .rgw_server import DAEMON_ORDER, RGWServer

__all__ = [
    "DAEMON_ORDER",
    "DEFAULT_STATE_FILE",
    "INSTALL_HINT",
    "REQUIRED_COMMANDS",
    "RGWError",
    "RGWNotInstalled",
    "RGWServer",
    "RGWStartError",
    "check_installed",
    "free_ports",
    "main",
    "missing_commands",
    "pid_alive",
]

DEFAULT_STATE_FILE = Path(tempfile.gettempdir()) / "s3kv-rgw-state.json"


# ---------------------------------------------------------------------- CLI
def _cmd_stop(state_file: Path, keep_data: bool, verbose: bool) -> int:
    if not state_file.exists():
        print(f"no state file {state_file}: nothing to stop", file=sys.stderr)
        return 1
    state = json.loads(state_file.read_text())
    t0 = time.monotonic()
    sup = state.get("supervisor_pid")
    if sup and pid_alive(sup) and "tests.servers.rgw" in pid_cmdline(sup):
        os.kill(sup, signal.SIGTERM)  # the supervisor stops the daemons and reaps them
        deadline = time.monotonic() + 60
        while pid_alive(sup) and time.monotonic() < deadline:
            time.sleep(0.05)
    # Whatever is left (supervisor killed, or it hung): stop the daemons by PID.
    RGWServer.from_state(state, keep_data=keep_data, verbose=verbose).stop()
    state_file.unlink(missing_ok=True)
    seconds = round(time.monotonic() - t0, 2)
    print(json.dumps({"stopped": state["pids"], "log_dir": state["log_dir"], "seconds": seconds}))
    return 0


def _cmd_start(a: argparse.Namespace) -> int:
    """Run `run --state FILE` as a detached supervisor; return once it is ready."""
    if a.state.exists():
        print(f"state file {a.state} exists: run `stop` first (or remove it)", file=sys.stderr)
        return 1
    sup_log = a.state.with_suffix(".log")
    cmd = [sys.executable, "-m", "tests.servers.rgw", "run", "--state", str(a.state)]
    cmd += ["--memstore-bytes", str(a.memstore_bytes)]
    if a.base_dir:
        cmd += ["--base-dir", str(a.base_dir)]
    if a.keep_data:
        cmd.append("--keep-data")
    if a.verbose:
        cmd.append("-v")
    repo_root = Path(__file__).resolve().parents[2]
    with open(sup_log, "ab") as log:
        sup = subprocess.Popen(
            cmd,
            cwd=repo_root,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 120
    while not a.state.exists():
        if sup.poll() is not None or time.monotonic() > deadline:
            if sup.poll() is None:
                sup.terminate()
                sup.wait(60)
            print(
                f"RGW did not start; supervisor log {sup_log}:\n{tail(sup_log, 60)}",
                file=sys.stderr,
            )
            return 1
        time.sleep(0.1)
    print(a.state.read_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.servers.rgw",
        description="Start/stop a throw-away Ceph RGW (S3) on 127.0.0.1, HTTP and HTTPS.",
        epilog="run: start, print endpoints as JSON, stop on Ctrl-C/SIGTERM. "
        "start: the same as a detached background supervisor (returns when ready). "
        "stop: stop what `start` started. check: are the packages installed?",
    )
    p.add_argument("command", choices=["run", "run-forever", "start", "stop", "check"])
    p.add_argument(
        "--state",
        type=Path,
        default=None,
        help=f"state file (JSON endpoints + PIDs); start/stop default {DEFAULT_STATE_FILE}",
    )
    p.add_argument("--base-dir", type=Path, default=None, help="parent of the temp directory")
    p.add_argument(
        "--keep-data", action="store_true", help="do not remove the data directory on stop"
    )
    p.add_argument("--memstore-bytes", type=int, default=2 << 30)
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)

    if a.command == "check":
        missing = missing_commands()
        if missing:
            print(f"missing: {missing}; {INSTALL_HINT}", file=sys.stderr)
            return 1
        print("ok")
        return 0
    if a.command in ("start", "stop"):
        a.state = a.state or DEFAULT_STATE_FILE
    if a.command == "stop":
        return _cmd_stop(a.state, a.keep_data, a.verbose)
    if a.command == "start":
        return _cmd_start(a)

    # run / run-forever: start, print, wait for Ctrl-C / SIGTERM, stop.
    srv = RGWServer(
        base_dir=a.base_dir,
        keep_data=a.keep_data,
        memstore_bytes=a.memstore_bytes,
        verbose=a.verbose,
    )

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)  # even if started with SIGINT ignored (bg job)
    try:
        srv.start()
        assert srv.start_seconds is not None
        info = srv.endpoints() | {
            "start_seconds": round(srv.start_seconds, 2),
            "supervisor_pid": os.getpid(),
        }
        if a.state:
            tmp = a.state.with_suffix(".tmp")
            tmp.write_text(json.dumps(info, indent=2))
            tmp.replace(a.state)  # atomic: `start` polls for this file
        print(json.dumps(info, indent=2), flush=True)
        print("RGW running; Ctrl-C to stop", file=sys.stderr, flush=True)
        while srv.running:
            time.sleep(0.5)
        print(f"a daemon exited; stopping. Logs: {srv.log_dir}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        srv.stop()
        if a.state:
            a.state.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
