"""``RGWServer``: start and stop a one-node Ceph cluster with a gateway, by PID.

Every daemon runs in the foreground (``-f``) as our child, in its own session, and
gets SIGTERM when we die. What the cluster is made of on disk is in ``rgw_cluster``.
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from . import rgw_cluster as cluster
from .rgw_process import Daemons, RGWError, RGWStartError, check_installed, free_ports

# Order matters for stop(): the gateway first, then the OSD, the monitor last.
DAEMON_ORDER = ("radosgw", "osd", "mon")


class RGWServer(Daemons):
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
        self.tls_dir: Path | None = None
        self.http_endpoint: str | None = None
        self.https_endpoint: str | None = None
        self.ca_bundle: str | None = None
        self.http_port: int | None = None
        self.https_port: int | None = None
        self.fsid: str | None = None
        self.start_seconds: float | None = None
        self.stop_seconds: float | None = None
        super().__init__()

    # ------------------------------------------------------------------ API
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

        Keeps the logs, removes the data directory unless keep_data; returns log_dir.
        Safe to call twice and after a failed start().
        """
        t0 = time.monotonic()
        survivors = self._stop_daemons(DAEMON_ORDER)
        if self.data_dir and self.data_dir.exists() and not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self.stop_seconds = time.monotonic() - t0
        if survivors:
            raise RGWError(f"daemons survived SIGKILL: {survivors}")
        if self.log_dir:
            self._log(f"RGW stopped in {self.stop_seconds:.1f}s; logs in {self.log_dir}")
        return self.log_dir

    def remove(self) -> None:
        """Delete everything stop() kept (logs, certificate): when nobody needs the logs."""
        if self._pids:
            raise RGWError("remove() before stop()")
        if self.base_dir and self.base_dir.exists():
            shutil.rmtree(self.base_dir, ignore_errors=True)

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

    # ------------------------------------------------------------- start-up
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
        cluster.make_keyring(self._run, d / "keyring")
        cluster.mkfs_mon(self._run, conf=conf, data_dir=d, fsid=self.fsid,
                         mon_v2=mon_v2, mon_v1=mon_v1)  # fmt: skip
        self._spawn("mon", "ceph-mon", "-c", conf, "-i", "a", "-f")

        # OSD: register it (waits for the monitor), give it a key, mkfs, start.
        osd_uuid = str(uuid.uuid4())
        secrets = cluster.osd_secrets(self._run, d)
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
            "radosgw-admin", "-c", conf, "user", "create",
            "--uid", self.user_id, "--display-name", self.user_id,
            "--access-key", self.access_key, "--secret-key", self.secret_key,
        )  # fmt: skip

    def _make_dirs(self) -> None:
        if self._base_dir_arg:
            self._base_dir_arg.mkdir(parents=True, exist_ok=True)
            self.base_dir = Path(tempfile.mkdtemp(prefix="rgw-", dir=self._base_dir_arg))
        else:
            self.base_dir = Path(tempfile.mkdtemp(prefix="s3kv-rgw-"))
        self.data_dir, self.log_dir, self.tls_dir = cluster.make_dirs(self.base_dir)
        self.conf = self.data_dir / "ceph.conf"

    def _make_cert(self) -> None:
        cert, self._key_pem = cluster.make_cert(self._run, self.tls_dir)
        self.ca_bundle = str(cert)

    def _write_conf(self, mon_v2: int, mon_v1: int) -> None:
        sections = cluster.conf_sections(
            fsid=self.fsid, data_dir=self.data_dir, log_dir=self.log_dir,
            mon_v2=mon_v2, mon_v1=mon_v1, http_port=self.http_port,
            https_port=self.https_port, cert=self.ca_bundle, key=self._key_pem,
            memstore_bytes=self.memstore_bytes,
        )  # fmt: skip
        cluster.write_conf(self.conf, sections, self.extra_conf)

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
