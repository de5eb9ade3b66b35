"""Which S3 client an I/O process beside vLLM's EngineCore should load rows with (issue 36,
point 3): the candidates side by side, each in a process of its own.

    .venv/bin/python bench/evidence/worker_clients.py     # quiet machine, about 5 minutes

The setting of that I/O process: one ``MAP_SHARED`` file in /dev/shm (as vLLM's CPU tier's
region), blocks of one size loaded from a fresh Ceph RGW 16 over loopback HTTP straight into
its rows, 16 requests in flight (the obj tier's I/O threads). Each client runs in a fresh
interpreter (as the worker would): it builds its client, loads every block once to warm
up, then loads them again ``ROUNDS`` times, zeroing the rows before each load and checking
every row's CRC32C against the block stored after it (outside the timings). Per load: wall
seconds and the process's CPU (every thread), so CPU per GiB.

* ``s3kv``: s3kv's data path, ``CrtS3Store.submit_get_into`` (awscrt; every answer bound
  to its request, ranged parts for large blocks, bytes copied into the row as they come);
* ``awscrt``: bare awscrt, one GET a block, each body chunk copied into its row, no check:
  the ceiling of awscrt through Python;
* ``awscrt-file`` (asked by ``--clients``): bare awscrt writing each body into a file of
  its own in /dev/shm in C (``recv_filepath``: no Python per part, no ``bytes``), then
  ``preadv`` of that file into the row and the file removed, when the request ends;
* ``awscrt-position`` (asked by ``--clients``; needs awscrt patched with
  ``awscrt-recv-file-position.patch`` beside this script, which passes aws-c-s3's own
  ``recv_file_option``/``recv_file_position`` through the Python binding): bare awscrt
  writing each body into its row of the region's file in C (``pwrite`` at the row's
  offset, through ``/proc/self/fd``: no Python per part, no ``bytes``, no spool), then the
  row's CRC32C taken, as s3kv's check would, when the request ends;
* ``obstore``: obstore (Rust's object_store, its own runtime), ``get_async`` then the
  body's bytes (no copy out of Rust) copied into the row, on asyncio;
* ``pyarrow``: pyarrow's S3 filesystem (the AWS C++ SDK, as NIXL's obj tier), a file
  opened per block (its HEAD, then a ranged GET) and ``readinto`` the row, on 16 threads
  (the GIL released while the SDK reads).

Each client runs in two processes, the second pass in reverse order. Writes
``worker-clients.json`` beside this file (``--out``: another name; ``--quick``: a smoke
run, nothing kept).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

CLIENTS: tuple[str, ...] = ("s3kv", "awscrt", "obstore", "pyarrow")
ALL_CLIENTS = (*CLIENTS, "awscrt-file", "awscrt-position")
SHAPES = {"2 MiB": (2 << 20, 256), "8 MiB": (8 << 20, 64)}
LOADED_BYTES = 512 << 20
ROUNDS = 3
IN_FLIGHT = 16


# -- the child: one client, one region, warm-up then ROUNDS timed loads ----------------------


def _s3kv(a: argparse.Namespace, keys: list[str], rows: list[memoryview]) -> Any:
    import threading

    from s3kv.naming.location import parse_location
    from s3kv.settings import S3Settings
    from s3kv.stores import open_store

    settings = S3Settings.resolve(endpoint_url=a.url, concurrency=IN_FLIGHT,
                                  access_key_id=a.key, secret_access_key=a.secret)
    store = open_store(parse_location(f"s3://{a.bucket}"), settings)
    parts, window = store.plan_loads(len(keys), len(rows[0]), IN_FLIGHT)

    def load() -> None:
        slots, left, idle = threading.Semaphore(window), [len(keys)], threading.Event()
        failed: list[BaseException] = []

        def done(_: Any, error: BaseException | None) -> None:
            if error is not None:
                failed.append(error)
            slots.release()
            with lock:
                left[0] -= 1
                if not left[0]:
                    idle.set()

        lock = threading.Lock()
        for key, row in zip(keys, rows):
            slots.acquire()
            store.submit_get_into(key, row, done, parts=parts)
        idle.wait()
        if failed:
            raise SystemExit(f"s3kv: {failed[0]}")

    return load


def _awscrt(a: argparse.Namespace, keys: list[str], rows: list[memoryview],
            to_file: bool = False, to_row: bool = False) -> Any:
    import atexit
    import ctypes
    import tempfile
    import threading

    from awscrt import auth, http, io, s3

    elg = io.EventLoopGroup(0)
    client = s3.S3Client(bootstrap=io.ClientBootstrap(elg, io.DefaultHostResolver(elg)),
                         region="us-east-1", part_size=8 << 20,
                         credential_provider=auth.AwsCredentialsProvider.new_static(
                             a.key, a.secret),
                         tls_mode=s3.S3RequestTlsMode.DISABLED,
                         max_active_connections_override=IN_FLIGHT)
    host = a.url.split("://")[1]
    if to_row:
        import inspect

        from awscrt.checksums import crc32c

        if "recv_file_position" not in inspect.signature(s3.S3Client.make_request).parameters:
            raise SystemExit("awscrt-position needs an awscrt whose make_request takes "
                             "recv_file_position (bench/evidence/awscrt-recv-file-position"
                             ".patch); this one does not")
        # the region's file by its descriptor, as the I/O process holds it (no path published)
        region_fd = os.open(a.region, os.O_RDWR)
        region_path = f"/proc/self/fd/{region_fd}"
    spool = tempfile.mkdtemp(prefix="worker-clients-", dir="/dev/shm") if to_file else ""
    if spool:  # each body's file is removed as its request ends; the folder at exit
        atexit.register(os.rmdir, spool)

    def load() -> None:
        slots, lock, idle, left = threading.Semaphore(IN_FLIGHT), threading.Lock(), \
            threading.Event(), [len(keys)]
        failed: list[Any] = []
        live: list[Any] = []
        for n, (key, row) in enumerate(zip(keys, rows)):
            slots.acquire()
            address = ctypes.addressof(ctypes.c_char.from_buffer(row))
            path = f"{spool}/{n}"

            def on_body(chunk: bytes, offset: int, address: int = address, **_: Any) -> None:
                ctypes.memmove(address + offset, chunk, len(chunk))

            def on_done(error: Any = None, status_code: int | None = None, row: Any = row,
                        path: str = path, **_: Any) -> None:
                if error is not None or (status_code or 0) >= 300:
                    failed.append(status_code or error)
                elif to_row:  # awscrt wrote the row itself; its check, as s3kv's would
                    crc32c(row)
                elif to_file:  # the body awscrt wrote, into the row (GIL let go)
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        if os.preadv(fd, [row], 0) != len(row):
                            failed.append(f"{path}: short")
                    finally:
                        os.close(fd)
                        os.unlink(path)
                slots.release()
                with lock:
                    left[0] -= 1
                    if not left[0]:
                        idle.set()

            request = http.HttpRequest("GET", f"/{a.bucket}/{key}",
                                       http.HttpHeaders([("Host", host)]))
            into = ({"recv_filepath": region_path, "recv_file_position": n * len(row)}
                    if to_row else {"recv_filepath": path} if to_file else {"on_body": on_body})
            live.append(client.make_request(
                type=s3.S3RequestType.GET_OBJECT, request=request, on_done=on_done, **into))
        idle.wait()
        if failed:
            raise SystemExit(f"awscrt: {failed[0]}")

    return load


def _awscrt_file(a: argparse.Namespace, keys: list[str], rows: list[memoryview]) -> Any:
    return _awscrt(a, keys, rows, to_file=True)


def _awscrt_position(a: argparse.Namespace, keys: list[str], rows: list[memoryview]) -> Any:
    return _awscrt(a, keys, rows, to_row=True)


def _obstore(a: argparse.Namespace, keys: list[str], rows: list[memoryview]) -> Any:
    import asyncio

    import obstore
    from obstore.store import S3Store

    store = S3Store(a.bucket, endpoint=a.url, region="us-east-1", access_key_id=a.key,
                    secret_access_key=a.secret, virtual_hosted_style_request=False,
                    client_options={"allow_http": True})

    async def one(slots: asyncio.Semaphore, key: str, row: memoryview) -> None:
        async with slots:
            got = await obstore.get_async(store, key)
            body = await got.bytes_async()
        row[:] = memoryview(body)

    async def all_blocks() -> None:
        slots = asyncio.Semaphore(IN_FLIGHT)
        await asyncio.gather(*(one(slots, k, r) for k, r in zip(keys, rows)))

    def load() -> None:
        asyncio.run(all_blocks())

    return load


def _pyarrow(a: argparse.Namespace, keys: list[str], rows: list[memoryview]) -> Any:
    from concurrent.futures import ThreadPoolExecutor

    from pyarrow import fs

    s3fs = fs.S3FileSystem(access_key=a.key, secret_key=a.secret, region="us-east-1",
                           scheme="http", endpoint_override=a.url.split("://")[1])
    pool = ThreadPoolExecutor(IN_FLIGHT)

    def one(key: str, row: memoryview) -> None:
        with s3fs.open_input_file(f"{a.bucket}/{key}") as f:
            if f.readinto(row) != len(row):
                raise SystemExit(f"pyarrow: {key} short")

    def load() -> None:
        list(pool.map(one, keys, rows))

    return load


def child(a: argparse.Namespace) -> None:
    from awscrt.checksums import crc32c

    keys = [f"blk/{i:05d}" for i in range(a.blocks)]
    expected = json.loads(Path(a.crcs).read_text())
    with open(a.region, "r+b") as f:
        region = mmap.mmap(f.fileno(), a.size * a.blocks, mmap.MAP_SHARED)
    view = memoryview(region)
    rows = [view[i * a.size:(i + 1) * a.size] for i in range(a.blocks)]
    load = {"s3kv": _s3kv, "awscrt": _awscrt, "awscrt-file": _awscrt_file,
            "awscrt-position": _awscrt_position,
            "obstore": _obstore, "pyarrow": _pyarrow}[a.client.split("@")[0]](a, keys, rows)
    results = []
    for r in range(ROUNDS + 1):
        view[:] = bytes(len(view))  # zeroed: a row not loaded cannot pass its check
        wall, cpu = time.perf_counter(), time.process_time()
        load()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        bad = [i for i, row in enumerate(rows) if crc32c(row) != expected[i]]
        if bad:
            raise SystemExit(f"{a.client}: {len(bad)} rows differ from what was stored")
        results.append({"warmup": r == 0, "seconds": round(wall, 3),
                        "cpu_s": round(cpu, 3)})
    print(json.dumps(results))


# -- the parent ------------------------------------------------------------------------------


def main() -> int:
    global CLIENTS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what")
    c = sub.add_parser("child")
    for name in ("client", "url", "bucket", "key", "secret", "region", "crcs"):
        c.add_argument(f"--{name}", required=True)
    c.add_argument("--size", type=int, required=True)
    c.add_argument("--blocks", type=int, required=True)
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: a few small blocks, any machine, output not kept")
    p.add_argument("--clients", default=",".join(CLIENTS),
                   help=f"which, comma-separated, of {', '.join(ALL_CLIENTS)}; an awscrt "
                        "client as NAME@KIB reads its sockets KIB at a time (awscrt built "
                        "with awscrt-recv-file-position.patch; default 16)")
    p.add_argument("--block-mib", default="2,8",
                   help="block sizes in MiB, comma-separated (512 MiB loaded at each)")
    p.add_argument("--out", default="worker-clients.json",
                   help="the JSON's name, written beside this script")
    a = p.parse_args()
    if a.what == "child":
        child(a)
        return 0
    CLIENTS = tuple(a.clients.split(","))
    if unknown := {c.split("@")[0] for c in CLIENTS} - set(ALL_CLIENTS):
        p.error(f"unknown clients {sorted(unknown)}: choose from {', '.join(ALL_CLIENTS)}")
    for client in (c for c in CLIENTS if "@" in c):
        name, _, kib = client.partition("@")
        if name not in ("s3kv", "awscrt", "awscrt-file", "awscrt-position") or \
                not kib.isdigit() or not int(kib):
            p.error(f"{client}: NAME@KIB is an awscrt client (s3kv, awscrt, awscrt-file, "
                    "awscrt-position) and a whole number of KiB, as awscrt@256")
        if "patch" not in awscrt_build():  # the stock build would ignore it, unlabelled
            p.error(f"{client}: this awscrt reads 16 KiB at a time whatever is asked; "
                    "build it with awscrt-recv-file-position.patch (see its header)")
    if Path(a.out).name != a.out or not a.out.endswith(".json"):
        p.error("--out is a file name ending in .json (written beside this script)")
    SHAPES.clear()
    for mib in (int(m) for m in a.block_mib.split(",")):
        SHAPES[f"{mib} MiB"] = (mib << 20, LOADED_BYTES // (mib << 20))
    if a.quick:
        SHAPES.clear()
        SHAPES["256 KiB"] = (256 << 10, 8)
    return parent(keep=not a.quick, out=a.out)


def awscrt_build() -> str:
    """awscrt's version, and whether it takes ``recv_file_position`` (the patch)."""
    import inspect

    import awscrt
    from awscrt import s3

    patched = "recv_file_position" in inspect.signature(s3.S3Client.make_request).parameters
    return awscrt.__version__ + (" + awscrt-recv-file-position.patch" if patched else "")


def parent(*, keep: bool, out: str = "worker-clients.json") -> int:
    import statistics

    import boto3
    from awscrt.checksums import crc32c

    from bench.evidence._rounds import quiet_start
    from bench.lib import trust
    from tests.servers.rgw import RGWServer

    load = quiet_start() if keep else -1.0
    commit = trust.commit()
    work = Path(tempfile.mkdtemp(prefix="worker-clients-", dir="/dev/shm"))
    server = RGWServer(memstore_bytes=4 << 30).start()
    runs: list[dict[str, Any]] = []
    try:
        url = server.endpoints()["http_endpoint"]
        admin = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                             aws_access_key_id=server.access_key,
                             aws_secret_access_key=server.secret_key)
        env = {**os.environ, "AWS_REGION": "us-east-1", "HOME": str(work)}
        env.pop("S3KV_TRACE_FILE", None)
        for n, (shape, (size, blocks)) in enumerate(SHAPES.items()):
            bucket = f"worker-clients-{n}"
            admin.create_bucket(Bucket=bucket)
            crcs = []
            for i in range(blocks):
                body = os.urandom(size)
                crcs.append(crc32c(body))
                admin.put_object(Bucket=bucket, Key=f"blk/{i:05d}", Body=body)
            (work / "crcs.json").write_text(json.dumps(crcs))
            region = work / "region"
            with open(region, "wb") as f:
                f.truncate(size * blocks)
            # each client in two processes, the second pass in reverse order
            for turn, client in enumerate(CLIENTS + CLIENTS[::-1]):
                argv = [sys.executable, __file__, "child", "--client", client, "--url", url,
                        "--bucket", bucket, "--key", server.access_key, "--secret",
                        server.secret_key, "--region", str(region), "--crcs",
                        str(work / "crcs.json"), "--size", str(size), "--blocks", str(blocks)]
                _, _, kib = client.partition("@")  # the patched build reads it at import
                child_env = {**env, "AWSCRT_BENCH_MAX_FRAGMENT_KIB": kib} if kib else env
                proc = subprocess.run(argv, env=child_env, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"{client} {shape}: {proc.stderr[-800:]}")
                for r, result in enumerate(json.loads(proc.stdout.splitlines()[-1])):
                    run = {"shape": shape, "client": client, "process": turn, "load": r,
                           **result}
                    runs.append(run)
                print(shape, client, [x["seconds"] for x in json.loads(
                    proc.stdout.splitlines()[-1])], flush=True)
            region.unlink()
    finally:
        server.stop()
        server.remove()
        shutil.rmtree(work, ignore_errors=True)
    summary = []
    for shape, (size, blocks) in SHAPES.items():
        gib = size * blocks / (1 << 30)
        for client in CLIENTS:
            mine = [r for r in runs if r["shape"] == shape and r["client"] == client
                    and not r["warmup"]]
            secs = [r["seconds"] for r in mine]
            cpu = [r["cpu_s"] / gib for r in mine]
            summary.append({
                "shape": shape, "client": client, "loads": len(mine),
                "seconds": statistics.median(secs), "seconds_range": [min(secs), max(secs)],
                "gib_s": round(gib / statistics.median(secs), 3),
                "cpu_s_per_gib": round(statistics.median(cpu), 3),
                "cpu_s_per_gib_range": [round(min(cpu), 3), round(max(cpu), 3)]})
    doc = {"what": __doc__.split("\n\n")[0], "commit": commit,
           "command": " ".join(["bench/evidence/worker_clients.py", *sys.argv[1:]]),
           "shapes": {k: {"block_bytes": v[0], "blocks": v[1]} for k, v in SHAPES.items()},
           "awscrt": awscrt_build(), "in_flight": IN_FLIGHT, "loads_per_process": ROUNDS,
           "processes_per_client": 2,
           "load_average_1m_at_start": round(load, 2), "summary": summary, "runs": runs}
    if keep:
        (HERE / out).write_text(json.dumps(doc, indent=1) + "\n")
    for row in summary:
        print(f"{row['shape']:6} {row['client']:8} {row['seconds']:6.3f} s "
              f"[{row['seconds_range'][0]:.3f}-{row['seconds_range'][1]:.3f}] "
              f"{row['gib_s']:5.2f} GiB/s  CPU {row['cpu_s_per_gib']:.2f} s/GiB "
              f"[{row['cpu_s_per_gib_range'][0]:.2f}-{row['cpu_s_per_gib_range'][1]:.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
