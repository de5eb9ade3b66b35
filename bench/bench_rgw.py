"""The transfer benchmark against Ceph RADOS Gateway, over HTTP and over TLS.

    python bench/bench_rgw.py [--quick] [--repeat N] [--json-dir DIR] [--force-loaded]

With ``--json-dir`` each endpoint's results land there as ``transfer-rgw-http.json`` and
``transfer-rgw-https.json``, each with its chart beside it (``.png``).

Starts a fresh single-node Ceph cluster with RGW on 127.0.0.1 (tests/servers/rgw.py;
install Ceph with scripts/rgw-install.sh), runs bench/bench_transfer.py against its HTTP
and HTTPS endpoints with the same clients as on moto, then stops every daemon.
boto3 rows run with checksum calculation "when_required": RGW over TLS rejects boto3's
default streaming checksums (s3kv's defaults need no such change).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # s3kv, bench.lib and tests.servers from this checkout

from bench.lib import trust as _trust  # noqa: E402
from tests.servers.rgw import RGWServer  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json-dir", type=Path)
    parser.add_argument("--only", choices=["http", "https"], help="one endpoint only")
    _trust.add_arguments(parser)
    args = parser.parse_args(argv)
    # Checked before Ceph starts: its start-up raises the load the children would see.
    trust = _trust.gate(args)
    command = "python bench/bench_rgw.py " + " ".join(sys.argv[1:])  # what reruns it
    # memstore keeps objects in RAM (about 2x): room for the 1 MiB rows of every client.
    rgw = RGWServer(memstore_bytes=10 << 30)
    with rgw:
        status = 0
        for scheme in ("http", "https"):
            if args.only and args.only != scheme:
                continue
            tls = scheme == "https"
            cmd = [
                sys.executable, str(ROOT / "bench" / "bench_transfer.py"),
                "--endpoint-url", rgw.https_endpoint if tls else rgw.http_endpoint,
                "--access-key", rgw.access_key, "--secret-key", rgw.secret_key,
                "--region", rgw.region, "--boto3-checksum", "when_required",
                "--label", f"Ceph RGW 16 ({'TLS' if tls else 'HTTP'})",
                "--repeat", str(args.repeat), "--command", command,
            ]
            if tls:
                cmd += ["--ca-bundle", rgw.ca_bundle]
            if args.quick:
                cmd.append("--quick")
            cmd += ["--start-load-average", str(trust["load_average_1m"])]
            if args.force_loaded:
                cmd.append("--force-loaded")
            if args.json_dir:
                args.json_dir.mkdir(parents=True, exist_ok=True)
                out = args.json_dir / f"transfer-rgw-{scheme}"
                cmd += ["--json", f"{out}.json", "--chart", f"{out}.png"]
            status |= subprocess.call(cmd)
    if status == 0:
        rgw.remove()  # its logs are kept only when a run failed
    else:
        print(f"Ceph RGW logs kept in {rgw.log_dir}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
