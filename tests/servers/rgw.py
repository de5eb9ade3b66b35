"""A throw-away single-node Ceph cluster with a RADOS Gateway (S3) on 127.0.0.1.

One monitor, one OSD on ``memstore`` (data lives in RAM, about 2x the stored
bytes) and one ``radosgw`` serving S3 over HTTP and HTTPS (self-signed
certificate for ``IP:127.0.0.1``).  Everything lives under one fresh temp
directory; every daemon runs in the foreground (``-f``) as our child and is
stopped by PID.  Logs are kept after ``stop()``; the data directory is removed
unless ``keep_data=True``.

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

Install the packages first with ``scripts/rgw-install.sh``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
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
DEFAULT_STATE_FILE = Path(tempfile.gettempdir()) / "s3kv-rgw-state.json"

# Order matters for stop(): the gateway first, then the OSD, the monitor last.
DAEMON_ORDER = ("radosgw", "osd", "mon")


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


def _pid_cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child
    """Child pre-exec: get SIGTERM when the parent dies (no leaked daemons)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


class RGWServer:
    """A single-node Ceph cluster (mon + memstore OSD + radosgw) on 127.0.0.1.

    Attributes valid after start(): http_endpoint, https_endpoint, ca_bundle,
    access_key, secret_key, region, log_dir, data_dir, base_dir, pids,
    start_seconds (and stop_seconds after stop()).
    """

    region = "us-east-1"
    DEFAULT_ACCESS_KEY = "S3KVTESTACCESSKEY000"
    DEFAULT_SECRET_KEY = "s3kvTestSecretKey0000000000000000000000000"

    def __init__(
        self,
        *,
        base_dir: str | os.PathLike | None = None,
        keep_data: bool = False,
        memstore_bytes: int = 2 << 30,
        access_key: str = DEFAULT_ACCESS_KEY,
        secret_key: str = DEFAULT_SECRET_KEY,
        user_id: str = "s3kv",
        start_timeout: float = 60.0,
        stop_timeout: float = 15.0,
        die_with_parent: bool = True,
        extra_conf: dict[str, dict[str, str]] | None = None,
        verbose: bool = False,
    ):
        self._base_dir_arg = Path(base_dir) if base_dir else None
        self.keep_data = keep_data
        self.memstore_bytes = memstore_bytes
        self.access_key = access_key
        self.secret_key = secret_key
        self.user_id = user_id
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.die_with_parent = die_with_parent
        self.extra_conf = extra_conf or {}
        self.verbose = verbose

        self.base_dir: Path | None = None
        self.data_dir: Path | None = None
        self.log_dir: Path | None = None
        self.tls_dir: Path | None = None
        self.conf: Path | None = None
        self.http_endpoint: str | None = None
        self.https_endpoint: str | None = None
        self.ca_bundle: str | None = None
        self.http_port: int | None = None
        self.https_port: int | None = None
        self.fsid: str | None = None
        self.start_seconds: float | None = None
        self.stop_seconds: float | None = None
        self._procs: dict[str, subprocess.Popen] = {}
        self._pids: dict[str, int] = {}  # also filled from a state file (detached stop)
        # Every daemon PID ever spawned by this object (never cleared), for checks.
        self.spawned_pids: dict[str, int] = {}
        self._deadline = 0.0

    # ------------------------------------------------------------------ API
    @property
    def pids(self) -> dict[str, int]:
        return dict(self._pids)

    @property
    def running(self) -> bool:
        return any(pid_alive(p) for p in self._pids.values())

    def __enter__(self) -> RGWServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> RGWServer:
        """Create a fresh cluster and start it; stops everything again on failure."""
        check_installed()
        if self._pids:
            raise RGWError("RGWServer already started")
        t0 = time.monotonic()
        self._deadline = t0 + self.start_timeout
        try:
            self._start()
        except BaseException as e:
            self.stop()
            if isinstance(e, RGWError):
                raise
            if isinstance(e, Exception):
                raise RGWStartError(f"{type(e).__name__}: {e}\n{self._diagnostics()}") from e
            raise
        self.start_seconds = time.monotonic() - t0
        self._log(
            f"RGW ready in {self.start_seconds:.1f}s: {self.http_endpoint} {self.https_endpoint}"
        )
        return self

    def stop(self) -> Path | None:
        """Stop every daemon by PID: radosgw, then the OSD, then the monitor.

        One at a time: SIGTERM, wait up to stop_timeout, then SIGKILL.  (All at
        once costs 5 s: an OSD whose monitor is gone waits osd_mon_shutdown_timeout.)
        Keeps the logs, removes the data directory unless keep_data; returns log_dir.
        Safe to call twice and after a failed start().
        """
        t0 = time.monotonic()
        for name in DAEMON_ORDER:
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
        if self.data_dir and self.data_dir.exists() and not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self.stop_seconds = time.monotonic() - t0
        if survivors:
            raise RGWError(f"daemons survived SIGKILL: {survivors}")
        if self.log_dir:
            self._log(f"RGW stopped in {self.stop_seconds:.1f}s; logs kept in {self.log_dir}")
        return self.log_dir

    def endpoints(self) -> dict:
        """Everything a client needs, JSON-serialisable."""
        return {
            "http_endpoint": self.http_endpoint,
            "https_endpoint": self.https_endpoint,
            "ca_bundle": self.ca_bundle,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "region": self.region,
            "log_dir": str(self.log_dir) if self.log_dir else None,
            "data_dir": str(self.data_dir) if self.data_dir else None,
            "base_dir": str(self.base_dir) if self.base_dir else None,
            "conf": str(self.conf) if self.conf else None,
            "pids": self.pids,
        }

    @classmethod
    def from_state(cls, state: dict, **kw) -> RGWServer:
        """An RGWServer that can stop() daemons started by another process."""
        srv = cls(**kw)
        srv.access_key = state["access_key"]
        srv.secret_key = state["secret_key"]
        srv.http_endpoint = state["http_endpoint"]
        srv.https_endpoint = state["https_endpoint"]
        srv.ca_bundle = state["ca_bundle"]
        for attr in ("log_dir", "data_dir", "base_dir", "conf"):
            if state.get(attr):
                setattr(srv, attr, Path(state[attr]))
        srv._pids = {k: int(v) for k, v in state["pids"].items()}
        return srv

    # ------------------------------------------------------------ internals
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
        return self.conf is not None and str(self.conf) in _pid_cmdline(pid)

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
            "ceph",
            "-c",
            self.conf,
            "--connect-timeout",
            str(int(timeout)),
            *args,
            timeout=timeout + 5,
        )

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
                preexec_fn=_set_pdeathsig if self.die_with_parent else None,
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
                parts.append(f"--- tail of {f.name} ---\n{_tail(f, 15)}")
        return "\n".join(parts)

    def _make_dirs(self) -> None:
        if self._base_dir_arg:
            self._base_dir_arg.mkdir(parents=True, exist_ok=True)
            self.base_dir = Path(tempfile.mkdtemp(prefix="rgw-", dir=self._base_dir_arg))
        else:
            self.base_dir = Path(tempfile.mkdtemp(prefix="s3kv-rgw-"))
        self.data_dir = self.base_dir / "data"
        self.log_dir = self.base_dir / "logs"
        self.tls_dir = self.base_dir / "tls"
        for d in (
            self.data_dir / "run",
            self.data_dir / "mon" / "ceph-a",
            self.data_dir / "osd" / "ceph-0",
            self.data_dir / "rgw" / "ceph-rgw.a",
            self.data_dir / "crash",
            self.log_dir,
            self.tls_dir,
        ):
            d.mkdir(parents=True, exist_ok=True)
        self.conf = self.data_dir / "ceph.conf"

    def _make_cert(self) -> None:
        key = self.tls_dir / "key.pem"
        cert = self.tls_dir / "cert.pem"
        cnf = self.tls_dir / "openssl.cnf"
        # A minimal config so the system openssl.cnf cannot change the result.
        cnf.write_text(
            "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = v3\n"
            "[dn]\nCN = 127.0.0.1\nO = s3kv test RGW\n"
            "[v3]\nsubjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid:always\n"
            "basicConstraints = critical, CA:TRUE\n"
            "keyUsage = critical, digitalSignature, keyCertSign\n"
            "extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1\n"
        )
        self._run(
            "openssl",
            "req",
            "-x509",
            "-config",
            cnf,
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "30",
        )
        self.ca_bundle = str(cert)
        self._key_pem = key

    def _write_conf(self, mon_v2: int, mon_v1: int) -> None:
        d, logs = self.data_dir, self.log_dir
        sections: dict[str, dict[str, str]] = {
            "global": {
                "fsid": self.fsid,
                "mon_host": f"[v2:127.0.0.1:{mon_v2},v1:127.0.0.1:{mon_v1}]",
                "mon_initial_members": "a",
                "public_addr": "127.0.0.1",
                "cluster_addr": "127.0.0.1",
                "ms_bind_ipv6": "false",
                "ms_bind_ipv4": "true",
                "auth_cluster_required": "cephx",
                "auth_service_required": "cephx",
                "auth_client_required": "cephx",
                "keyring": str(d / "keyring"),
                "run_dir": str(d / "run"),
                "admin_socket": str(d / "run" / "$cluster-$name.asok"),
                "crash_dir": str(d / "crash"),
                "log_file": str(logs / "$cluster-$name.log"),
                "log_to_stderr": "false",
                "err_to_stderr": "true",
                "mon_cluster_log_file": str(logs / "ceph.log"),
                "mon_data": str(d / "mon" / "$cluster-$id"),
                "osd_data": str(d / "osd" / "$cluster-$id"),
                "rgw_data": str(d / "rgw" / "$cluster-$id"),
                "osd_objectstore": "memstore",
                "memstore_device_bytes": str(self.memstore_bytes),
                "osd_pool_default_size": "1",
                "osd_pool_default_min_size": "1",
                "osd_pool_default_pg_num": "8",
                "osd_pool_default_pgp_num": "8",
                "osd_pool_default_pg_autoscale_mode": "off",
                "osd_crush_chooseleaf_type": "0",
                "mon_allow_pool_size_one": "true",
                "mon_warn_on_pool_no_redundancy": "false",
                "mon_max_pg_per_osd": "1000",
                "paxos_propose_interval": "0.1",
                "mon_data_avail_crit": "1",
                "mon_data_avail_warn": "2",
            },
            "osd": {
                "keyring": str(d / "osd" / "$cluster-$id" / "keyring"),
            },
            "client.rgw.a": {
                "rgw_frontends": (
                    f"beast endpoint=127.0.0.1:{self.http_port} "
                    f"ssl_endpoint=127.0.0.1:{self.https_port} "
                    f"ssl_certificate={self.ca_bundle} ssl_private_key={self._key_pem}"
                ),
                "rgw_dns_name": "127.0.0.1",
                "rgw_enable_usage_log": "false",
                # The lifecycle worker sleeps 5 s when it misses a shard lock and
                # radosgw waits for it on SIGTERM (stop took 5 s instead of ~0.1 s).
                # The lifecycle *API* still works; only background expiry is off.
                # Re-enable with extra_conf={"client.rgw.a": {"rgw_enable_lc_threads": "true"}}.
                "rgw_enable_lc_threads": "false",
            },
        }
        for sect, kv in self.extra_conf.items():
            sections.setdefault(sect, {}).update(kv)
        text = "".join(
            f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items()) + "\n"
            for s, kv in sections.items()
        )
        self.conf.write_text(text)

    def _start(self) -> None:
        self._make_dirs()
        self._log(f"starting Ceph RGW in {self.base_dir}")
        self.fsid = str(uuid.uuid4())
        mon_v2, mon_v1, self.http_port, self.https_port = free_ports(4)
        self.http_endpoint = f"http://127.0.0.1:{self.http_port}"
        self.https_endpoint = f"https://127.0.0.1:{self.https_port}"
        self._make_cert()
        self._write_conf(mon_v2, mon_v1)
        conf, d = self.conf, self.data_dir
        keyring = d / "keyring"

        # Keys: mon. + client.admin + the gateway in the shared keyring
        # (imported into the monitor's auth database by mkfs).
        auth = ("ceph-authtool", keyring)
        self._run(*auth, "--create-keyring", "--gen-key", "-n", "mon.", "--cap", "mon", "allow *")
        self._run(
            *auth,
            "--gen-key",
            "-n",
            "client.admin",
            "--cap",
            "mon",
            "allow *",
            "--cap",
            "osd",
            "allow *",
            "--cap",
            "mds",
            "allow *",
            "--cap",
            "mgr",
            "allow *",
        )
        self._run(
            *auth,
            "--gen-key",
            "-n",
            "client.rgw.a",
            "--cap",
            "mon",
            "allow rw",
            "--cap",
            "osd",
            "allow rwx",
        )

        monmap = d / "monmap"
        self._run(
            "monmaptool",
            "--create",
            "--fsid",
            self.fsid,
            "--addv",
            "a",
            f"[v2:127.0.0.1:{mon_v2},v1:127.0.0.1:{mon_v1}]",
            monmap,
        )
        self._run(
            "ceph-mon", "-c", conf, "--mkfs", "-i", "a", "--monmap", monmap, "--keyring", keyring
        )
        self._spawn("mon", "ceph-mon", "-c", conf, "-i", "a", "-f")

        # OSD: register it (waits for the monitor), give it a key, mkfs, start.
        osd_uuid = str(uuid.uuid4())
        osd_dir = d / "osd" / "ceph-0"
        osd_keyring = osd_dir / "keyring"
        self._run("ceph-authtool", "--create-keyring", osd_keyring, "--gen-key", "-n", "osd.0")
        secret = self._run("ceph-authtool", osd_keyring, "-p", "-n", "osd.0").strip()
        secrets = d / "osd-secrets.json"
        secrets.write_text(json.dumps({"cephx_secret": secret}))
        osd_id = self._ceph("osd", "new", osd_uuid, "-i", str(secrets)).strip()
        if osd_id != "0":
            raise RGWStartError(f"expected osd id 0, got {osd_id!r}")
        self._check_alive()
        self._run("ceph-osd", "-c", conf, "-i", "0", "--mkfs", "--osd-uuid", osd_uuid)
        self._spawn("osd", "ceph-osd", "-c", conf, "-i", "0", "-f")

        # The gateway waits for the OSD itself while it creates its pools.
        self._spawn("radosgw", "radosgw", "-c", conf, "-n", "client.rgw.a", "-f")
        self._wait_http()
        self._run(
            "radosgw-admin",
            "-c",
            conf,
            "user",
            "create",
            "--uid",
            self.user_id,
            "--display-name",
            self.user_id,
            "--access-key",
            self.access_key,
            "--secret-key",
            self.secret_key,
        )

    def _wait_http(self) -> None:
        ctx = ssl.create_default_context(cafile=self.ca_bundle)
        pending = {self.http_endpoint + "/": None, self.https_endpoint + "/": ctx}
        while pending:
            self._check_alive()
            self._remaining()
            for url, c in list(pending.items()):
                try:
                    with urllib.request.urlopen(url, timeout=2, context=c) as r:
                        if r.status == 200:
                            del pending[url]
                except (urllib.error.URLError, OSError, ssl.SSLError) as e:
                    if isinstance(e, urllib.error.URLError) and isinstance(e.reason, ssl.SSLError):
                        raise RGWStartError(
                            f"TLS error on {url}: {e}\n{self._diagnostics()}"
                        ) from e
            if pending:
                time.sleep(0.1)


# ---------------------------------------------------------------------- CLI
def _cmd_stop(state_file: Path, keep_data: bool, verbose: bool) -> int:
    if not state_file.exists():
        print(f"no state file {state_file}: nothing to stop", file=sys.stderr)
        return 1
    state = json.loads(state_file.read_text())
    t0 = time.monotonic()
    sup = state.get("supervisor_pid")
    if sup and pid_alive(sup) and "tests.servers.rgw" in _pid_cmdline(sup):
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
                f"RGW did not start; supervisor log {sup_log}:\n{_tail(sup_log, 60)}",
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
