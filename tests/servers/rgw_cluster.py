"""What a one-node Ceph cluster with a gateway is made of, on disk.

The directory layout, the gateway's TLS certificate, ``ceph.conf`` and the keys and
monitor map that ``mkfs`` needs. Pure file writing plus the commands that create them;
starting and stopping the daemons is ``rgw_server.RGWServer``'s business.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

# run(*args) -> stdout: the server's command runner (deadline, logs, errors).
Run = Callable[..., str]

# Directories under data/ that the daemons expect to exist.
DATA_SUBDIRS = ("run", "mon/ceph-a", "osd/ceph-0", "rgw/ceph-rgw.a", "crash")


def make_dirs(base_dir: Path) -> tuple[Path, Path, Path]:
    """data/, logs/ and tls/ under base_dir (created); returns them in that order."""
    data, logs, tls = base_dir / "data", base_dir / "logs", base_dir / "tls"
    for d in (*(data / s for s in DATA_SUBDIRS), logs, tls):
        d.mkdir(parents=True, exist_ok=True)
    return data, logs, tls


def make_cert(run: Run, tls_dir: Path, names: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A self-signed EC certificate for IP:127.0.0.1 (and the DNS ``names``); returns
    (cert, key)."""
    key = tls_dir / "key.pem"
    cert = tls_dir / "cert.pem"
    cnf = tls_dir / "openssl.cnf"
    # A minimal config so the system openssl.cnf cannot change the result.
    cnf.write_text(
        "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = v3\n"
        "[dn]\nCN = 127.0.0.1\nO = s3kv test RGW\n"
        "[v3]\nsubjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid:always\n"
        "basicConstraints = critical, CA:TRUE\n"
        "keyUsage = critical, digitalSignature, keyCertSign\n"
        "extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1"
        + "".join(f",DNS:{name}" for name in names) + "\n"
    )
    run(
        "openssl", "req", "-x509", "-config", cnf,
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", key, "-out", cert, "-days", "30",
    )  # fmt: skip
    return cert, key


def mon_addrs(mon_v2: int, mon_v1: int) -> str:
    return f"[v2:127.0.0.1:{mon_v2},v1:127.0.0.1:{mon_v1}]"


def conf_sections(
    *,
    fsid: str,
    data_dir: Path,
    log_dir: Path,
    mon_v2: int,
    mon_v1: int,
    http_port: int,
    https_port: int,
    cert: str,
    key: Path,
    memstore_bytes: int,
) -> dict[str, dict[str, str]]:
    """ceph.conf as sections: one monitor, one memstore OSD, one gateway, all on loopback."""
    d, logs = data_dir, log_dir
    return {
        "global": {
            "fsid": fsid,
            "mon_host": mon_addrs(mon_v2, mon_v1),
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
            "memstore_device_bytes": str(memstore_bytes),
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
                f"beast endpoint=127.0.0.1:{http_port} "
                f"ssl_endpoint=127.0.0.1:{https_port} "
                f"ssl_certificate={cert} ssl_private_key={key}"
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


def write_conf(
    path: Path, sections: dict[str, dict[str, str]], extra: dict[str, dict[str, str]]
) -> None:
    """Write sections (extra merged in, key by key) as an ini file."""
    merged = {s: dict(kv) for s, kv in sections.items()}
    for sect, kv in extra.items():
        merged.setdefault(sect, {}).update(kv)
    path.write_text(
        "".join(
            f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items()) + "\n"
            for s, kv in merged.items()
        )
    )


def make_keyring(run: Run, keyring: Path) -> None:
    """Keys for mon., client.admin and the gateway in one keyring (mkfs imports it)."""
    auth = ("ceph-authtool", keyring)
    run(*auth, "--create-keyring", "--gen-key", "-n", "mon.", "--cap", "mon", "allow *")
    run(
        *auth, "--gen-key", "-n", "client.admin",
        "--cap", "mon", "allow *", "--cap", "osd", "allow *",
        "--cap", "mds", "allow *", "--cap", "mgr", "allow *",
    )  # fmt: skip
    run(
        *auth, "--gen-key", "-n", "client.rgw.a",
        "--cap", "mon", "allow rw", "--cap", "osd", "allow rwx",
    )  # fmt: skip


def mkfs_mon(run: Run, *, conf: Path, data_dir: Path, fsid: str, mon_v2: int, mon_v1: int) -> None:
    """The monitor map and the monitor's store (before the monitor starts)."""
    monmap = data_dir / "monmap"
    run("monmaptool", "--create", "--fsid", fsid, "--addv", "a", mon_addrs(mon_v2, mon_v1), monmap)
    run("ceph-mon", "-c", conf, "--mkfs", "-i", "a", "--monmap", monmap,
        "--keyring", data_dir / "keyring")  # fmt: skip


def osd_secrets(run: Run, data_dir: Path) -> Path:
    """A fresh osd.0 key in its keyring, and the JSON file `ceph osd new -i` reads."""
    osd_keyring = data_dir / "osd" / "ceph-0" / "keyring"
    run("ceph-authtool", "--create-keyring", osd_keyring, "--gen-key", "-n", "osd.0")
    secret = run("ceph-authtool", osd_keyring, "-p", "-n", "osd.0").strip()
    secrets = data_dir / "osd-secrets.json"
    secrets.write_text(json.dumps({"cephx_secret": secret}))
    return secrets
