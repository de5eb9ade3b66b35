"""Host facts and child processes for the Ceph RGW test server.

What is installed, which ports are free, the errors every part of the server raises,
and ``Daemons``: children started in the foreground, run under a start-up deadline,
and stopped one by one by PID.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

INSTALL_HINT = (
    "run scripts/rgw-install.sh (as root) to install "
    "ceph-mon, ceph-osd, radosgw, ceph-common and openssl"
)
REQUIRED_COMMANDS = (
    "ceph",
    "ceph-authtool",
    "monmaptool",
    "ceph-mon",
    "ceph-osd",
    "radosgw",
    "radosgw-admin",
    "openssl",
)


class RGWError(RuntimeError):
    """Ceph RGW could not be installed, started or stopped."""


class RGWNotInstalled(RGWError):
    pass


class RGWStartError(RGWError):
    pass


def missing_commands() -> list[str]:
    return [c for c in REQUIRED_COMMANDS if shutil.which(c) is None]


def check_installed() -> None:
    """Raise RGWNotInstalled (naming scripts/rgw-install.sh) if anything is missing."""
    missing = missing_commands()
    if missing:
        raise RGWNotInstalled(f"Ceph RGW test server: missing commands {missing}; {INSTALL_HINT}")


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free TCP ports on host (bind to port 0, note the port, close)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def pid_alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def pid_cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def set_pdeathsig() -> None:  # pragma: no cover - runs in the child
    """Child pre-exec: get SIGTERM when the parent dies (no leaked daemons)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


class Daemons:
    """Daemons we spawn and stop by PID, their logs, and the start-up deadline.

    The subclass sets log_dir (each daemon's stdout goes there), conf (a stopped
    daemon of ours has it on its command line), start_timeout and verbose.
    """

    log_dir: Path | None = None
    conf: Path | None = None
    start_timeout = 60.0
    stop_timeout = 15.0
    die_with_parent = True
    verbose = False

    def __init__(self) -> None:
        self._procs: dict[str, subprocess.Popen] = {}
        self._pids: dict[str, int] = {}  # also filled from a state file (detached stop)
        # Every daemon PID ever spawned by this object (never cleared), for checks.
        self.spawned_pids: dict[str, int] = {}
        self._deadline = 0.0

    @property
    def pids(self) -> dict[str, int]:
        return dict(self._pids)

    @property
    def running(self) -> bool:
        return any(pid_alive(p) for p in self._pids.values())

    def _stop_daemons(self, order: tuple[str, ...]) -> dict[str, int]:
        """SIGTERM each in order, wait up to stop_timeout, then SIGKILL; returns survivors.

        One at a time: all at once costs 5 s (an OSD whose monitor is gone waits
        osd_mon_shutdown_timeout).
        """
        for name in order:
            pid = self._pids.get(name)
            if pid is None or not self._is_ours(name, pid):
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not self._wait_exit(name, pid, time.monotonic() + self.stop_timeout):
                self._log(f"{name} (pid {pid}) ignored SIGTERM for {self.stop_timeout}s: SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._wait_exit(name, pid, time.monotonic() + 10)
        survivors = {n: p for n, p in self._pids.items() if pid_alive(p) and self._is_ours(n, p)}
        self._procs.clear()
        self._pids.clear()
        return survivors

    def _log(self, msg: str) -> None:
        print(f"[rgw] {msg}", file=sys.stderr, flush=True)

    def _vlog(self, msg: str) -> None:
        if self.verbose:
            self._log(msg)

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise RGWStartError(
                f"RGW not ready within {self.start_timeout}s\n{self._diagnostics()}"
            )
        return left

    def _is_ours(self, name: str, pid: int) -> bool:
        """Guard against PID reuse for daemons we did not spawn in this process."""
        if name in self._procs:
            return True
        return self.conf is not None and str(self.conf) in pid_cmdline(pid)

    def _wait_exit(self, name: str, pid: int, deadline: float) -> bool:
        proc = self._procs.get(name)
        while True:
            if proc is not None:
                if proc.poll() is not None:
                    return True
            elif not pid_alive(pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _run(self, *args: str, timeout: float | None = None, input: str | None = None) -> str:
        cmd = [str(a) for a in args]
        self._vlog("$ " + " ".join(cmd))
        t = min(timeout or 60.0, self._remaining())
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=t, input=input)
        except subprocess.TimeoutExpired as e:
            raise RGWStartError(
                f"timed out after {t:.0f}s: {' '.join(cmd)}\n{self._diagnostics()}"
            ) from e
        if res.returncode != 0:
            raise RGWStartError(
                f"command failed (exit {res.returncode}): {' '.join(cmd)}\n"
                f"stdout: {res.stdout[-2000:]}\nstderr: {res.stderr[-2000:]}\n{self._diagnostics()}"
            )
        return res.stdout

    def _ceph(self, *args: str, timeout: float = 30.0) -> str:
        return self._run(
            "ceph", "-c", self.conf, "--connect-timeout", str(int(timeout)), *args,
            timeout=timeout + 5,
        )  # fmt: skip

    def _spawn(self, name: str, *args: str) -> None:
        cmd = [str(a) for a in args]
        self._vlog("& " + " ".join(cmd))
        with open(self.log_dir / f"{name}.stdout.log", "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in a terminal does not reach the daemons
                preexec_fn=set_pdeathsig if self.die_with_parent else None,
            )
        self._procs[name] = proc
        self._pids[name] = proc.pid
        self.spawned_pids[name] = proc.pid

    def _check_alive(self) -> None:
        for name, proc in self._procs.items():
            rc = proc.poll()
            if rc is not None:
                raise RGWStartError(
                    f"{name} (pid {proc.pid}) exited with {rc} during start-up\n"
                    + self._diagnostics()
                )

    def _diagnostics(self) -> str:
        if not self.log_dir or not self.log_dir.exists():
            return ""
        parts = [f"logs in {self.log_dir}"]
        for f in sorted(self.log_dir.glob("*.log")):
            if f.stat().st_size:
                parts.append(f"--- tail of {f.name} ---\n{tail(f, 15)}")
        return "\n".join(parts)
