"""What an I/O process beside EngineCore would change (issue 36), measured before building
it: the same load through s3kv's data path in the engine's process and in a process of
its own that writes into the engine's shared region.

    .venv/bin/python bench/evidence/io_process.py     # quiet machine, about 3 minutes

The engine here is bench/lib/engine_loop.py's stand-in EngineCore loop (a scheduler
step's Python work, a wait that releases the GIL, one poll of the tier), and its CPU tier
one ``MAP_SHARED`` file in /dev/shm, as vLLM's ``SharedOffloadRegion``. A prompt's blocks
(192 MiB, in 2 MiB or 8 MiB blocks) are loaded from a fresh Ceph RGW 16 over loopback HTTP
into the region's rows, 16 requests in flight, on s3kv's data path
(``CrtS3Store.submit_get_into`` under a :class:`~s3kv.transfers.jobs.TransferJob`), either

* ``in-process``: in the engine's process, as s3kv's tier loads today, the loop polling
  the job; or
* ``io-process``: in a worker started with fork+exec (``subprocess``), handed the
  region's file descriptor and one end of a socket pair (``pass_fds``), that maps the
  region, takes one job message and answers one line when every row is in; the loop
  polls the socket without blocking. The worker dies with the engine
  (``PR_SET_PDEATHSIG``) and at the end of file on its socket.

Per load: seconds from the job's submission to the poll that sees it done, the loop's
steps per second meanwhile, and CPU per GiB of the engine's process (the loop's own work
taken out) and of the worker. Every row is checked against the block's CRC32C after each
load (outside the timings); rows are zeroed before each. Modes alternate, a warm-up load
of each is not counted. Writes ``io-process.json`` beside this file (``IO_PROCESS_QUICK=1``:
a smoke run of a few small blocks, nothing kept).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = {"2 MiB": (2 << 20, 96), "8 MiB": (8 << 20, 24)}
QUICK = bool(os.environ.get("IO_PROCESS_QUICK"))
if QUICK:  # a smoke run: a few small blocks, on any machine, nothing kept
    SHAPES = {"256 KiB": (256 << 10, 8)}
ROUNDS = 5
IN_FLIGHT = 16
MODES = ("in-process", "io-process")


def loader(url: str, bucket: str, key: str, secret: str, rows: list[memoryview]) -> Any:
    """``load(keys) -> TransferJob``: s3kv's data path into ``rows``."""
    from s3kv.naming.location import parse_location
    from s3kv.settings import S3Settings
    from s3kv.stores import open_store
    from s3kv.transfers.jobs import BlockResult, Done, TransferJob

    settings = S3Settings.resolve(endpoint_url=url, concurrency=IN_FLIGHT, access_key_id=key,
                                  secret_access_key=secret)
    store = open_store(parse_location(f"s3://{bucket}"), settings)

    class Get:
        def __init__(self, name: str, row: memoryview, parts: int) -> None:
            self.key, self.name, self.row, self.parts = name.encode(), name, row, parts

        def start(self, done: Done) -> Any:
            def got(info: Any, error: BaseException | None) -> None:
                done(BlockResult(self.key, "done", nbytes=len(self.row)) if error is None
                     else None, error)

            return store.submit_get_into(self.name, self.row, got, parts=self.parts)

        def give_up(self, reason: str) -> BlockResult:
            return BlockResult(self.key, "failed", reason=reason)

    def load(names: list[str]) -> TransferJob:
        parts, window = store.plan_loads(len(names), len(rows[0]), IN_FLIGHT)
        return TransferJob("download", [Get(n, rows[i], parts) for i, n in enumerate(names)],
                           window=window, settings=settings)

    return load


def region_rows(fd: int, size: int, blocks: int) -> tuple[mmap.mmap, list[memoryview]]:
    area = mmap.mmap(fd, size * blocks, mmap.MAP_SHARED)
    view = memoryview(area)
    return area, [view[i * size:(i + 1) * size] for i in range(blocks)]


# -- the worker ------------------------------------------------------------------------------


def worker(a: argparse.Namespace) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with the engine
    if os.getppid() != a.parent:
        return 1  # the engine died before the line above
    _, rows = region_rows(a.fd, a.size, a.blocks)
    load = loader(a.url, a.bucket, a.key, a.secret, rows)
    sock = socket.socket(fileno=a.sock)
    lines = sock.makefile("rb")
    for line in lines:  # one job a line; the end of file: the engine is gone
        job = load(json.loads(line))
        report = job.wait()
        sock.sendall(json.dumps({"failed": len(report.failed)}).encode() + b"\n")
    return 0


# -- the engine --------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what")
    w = sub.add_parser("worker")
    for name in ("url", "bucket", "key", "secret"):
        w.add_argument(f"--{name}", required=True)
    for name in ("fd", "sock", "size", "blocks", "parent"):
        w.add_argument(f"--{name}", type=int, required=True)
    a = p.parse_args()
    if a.what == "worker":
        return worker(a)
    return engine()


def engine() -> int:
    import boto3
    from awscrt.checksums import crc32c

    from bench.evidence._rounds import cpu_of, quiet_start
    from bench.lib import engine_loop, trust
    from tests.servers.rgw import RGWServer

    load_average = -1.0 if QUICK else quiet_start()
    commit = trust.commit()
    engine_loop.calibrate()
    server = RGWServer(memstore_bytes=2 << 30).start()
    runs: list[dict[str, Any]] = []
    try:
        url = server.endpoints()["http_endpoint"]
        creds = (server.access_key, server.secret_key)
        admin = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                             aws_access_key_id=creds[0], aws_secret_access_key=creds[1])
        for n, (shape, (size, blocks)) in enumerate(SHAPES.items()):
            bucket = f"io-process-{n}"
            admin.create_bucket(Bucket=bucket)
            names = [f"blk/{i:05d}" for i in range(blocks)]
            crcs = []
            for name in names:
                body = os.urandom(size)
                crcs.append(crc32c(body))
                admin.put_object(Bucket=bucket, Key=name, Body=body)
            fd, path = tempfile.mkstemp(prefix="s3kv-region-", dir="/dev/shm")
            os.unlink(path)  # the worker gets the descriptor, never a path
            os.ftruncate(fd, size * blocks)
            area, rows = region_rows(fd, size, blocks)
            in_process = loader(url, bucket, *creds, rows)
            ours, theirs = socket.socketpair()
            proc = subprocess.Popen(
                [sys.executable, __file__, "worker", "--url", url, "--bucket", bucket,
                 "--key", creds[0], "--secret", creds[1], "--fd", str(fd), "--sock",
                 str(theirs.fileno()), "--size", str(size), "--blocks", str(blocks),
                 "--parent", str(os.getpid())],
                pass_fds=(fd, theirs.fileno()))
            theirs.close()
            ours.setblocking(False)
            try:
                for r in range(ROUNDS + 1):
                    for mode in (MODES if r % 2 else MODES[::-1]):
                        area[:] = bytes(len(area))
                        runs.append({"shape": shape, "mode": mode, "round": r,
                                     "warmup": r == 0,
                                     **one_load(mode, in_process, names, ours, proc.pid,
                                                size * blocks, cpu_of)})
                        bad = sum(crc32c(row) != c for row, c in zip(rows, crcs))
                        if bad:
                            raise SystemExit(f"{shape} {mode}: {bad} rows differ")
                        print(json.dumps(runs[-1]), flush=True)
            finally:
                ours.close()  # the worker's end of file
                proc.wait(timeout=30)
                for row in rows:
                    row.release()
                area.close()
                os.close(fd)
    finally:
        server.stop()
        server.remove()
    summary = []
    for shape in SHAPES:
        for mode in MODES:
            mine = [r for r in runs if r["shape"] == shape and r["mode"] == mode
                    and not r["warmup"]]
            row: dict[str, Any] = {"shape": shape, "mode": mode, "loads": len(mine)}
            for field in ("seconds", "steps_per_s", "engine_cpu_s_per_gib",
                          "worker_cpu_s_per_gib"):
                values = [r[field] for r in mine]
                row[field] = round(statistics.median(values), 3)
                row[f"{field}_range"] = [min(values), max(values)]
            summary.append(row)
    doc = {"what": __doc__.split("\n\n")[0], "commit": commit, "in_flight": IN_FLIGHT,
           "shapes": {k: {"block_bytes": v[0], "blocks": v[1]} for k, v in SHAPES.items()},
           "rounds": ROUNDS, "load_average_1m_at_start": round(load_average, 2),
           "summary": summary, "runs": runs}
    if not QUICK:
        (HERE / "io-process.json").write_text(json.dumps(doc, indent=1) + "\n")
    for row in summary:
        print(f"{row['shape']:6} {row['mode']:10} {row['seconds']:.3f} s "
              f"[{row['seconds_range'][0]:.3f}-{row['seconds_range'][1]:.3f}]  loop "
              f"{row['steps_per_s']:.0f} steps/s  CPU/GiB engine {row['engine_cpu_s_per_gib']}"
              f" worker {row['worker_cpu_s_per_gib']}")
    return 0


def one_load(mode: str, in_process: Any, names: list[str], sock: socket.socket,
             worker_pid: int, nbytes: int, cpu_of: Any) -> dict[str, float]:
    from bench.lib import engine_loop

    gib = nbytes / (1 << 30)
    worker0, cpu0 = cpu_of(worker_pid), time.process_time()
    start = time.perf_counter()
    if mode == "in-process":
        job = in_process(names)
        steps = engine_loop.run_until(job.done)
        failed = len(job.result().failed)
    else:
        sock.sendall(json.dumps(names).encode() + b"\n")
        answer = bytearray()

        def answered() -> bool:
            try:
                answer.extend(sock.recv(4096))
            except BlockingIOError:
                pass
            return answer.endswith(b"\n")

        steps = engine_loop.run_until(answered)
        failed = json.loads(answer)["failed"]
    seconds = time.perf_counter() - start
    if failed:
        raise SystemExit(f"{mode}: {failed} blocks failed")
    engine_cpu = time.process_time() - cpu0 - steps.work_cpu_seconds
    return {"seconds": round(seconds, 3), "steps_per_s": round(steps.per_second, 1),
            "engine_cpu_s_per_gib": round(engine_cpu / gib, 3),
            "worker_cpu_s_per_gib": round((cpu_of(worker_pid) - worker0) / gib, 3)}


if __name__ == "__main__":
    sys.exit(main())
