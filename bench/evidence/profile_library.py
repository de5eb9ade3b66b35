"""Where the library's CPU goes per block (issue 37, point 2): one Uploader job and one
Downloader job of 640 x 256 KiB on a fresh Ceph RGW over loopback HTTP, each under
cProfile, the functions with the most time of their own.

    .venv/bin/python bench/evidence/profile_library.py     # quiet machine, about a minute

Writes ``profile-library.txt`` beside this file: wall and process CPU seconds of each job,
once without the profiler and once with it, split into the calling thread's CPU and the
rest (awscrt's event-loop threads: the C client, and the Python it calls back for each
request's finish, where later blocks are submitted). cProfile sees the calling thread
only, so its table (the top 25 functions by their own time) covers that share; what runs
on awscrt's threads needs a sampling profiler across threads (py-spy, not a dependency).
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
import numpy as np  # noqa: E402

from s3kv import Downloader, Namespace, S3Settings, Uploader, make_offload_key  # noqa: E402
from tests.servers.rgw import RGWServer  # noqa: E402

BLOCKS, SIZE = 640, 256 * 1024


def job(url: str, ns: Namespace, settings: S3Settings, profile: bool) -> list[str]:
    rows = np.random.default_rng(0).integers(0, 256, (BLOCKS, SIZE), dtype=np.uint8)
    keys = [make_offload_key(os.urandom(32), 0) for _ in range(BLOCKS)]
    out = np.zeros_like(rows)
    lines = []
    with Uploader(url, ns, settings=settings) as up, Downloader(url, ns, settings=settings) as down:
        up.ensure_manifest()
        down.contains(keys[:1])  # connections and the store's echoes learnt before timing
        for name, run in (("Uploader.put_blocks", lambda: up.put_blocks(dict(zip(keys, rows)))),
                          ("Downloader.get_blocks", lambda: down.get_blocks(keys, into=list(out)))):
            prof = cProfile.Profile()
            c0, t0, m0 = time.process_time(), time.perf_counter(), time.thread_time()
            if profile:
                prof.enable()
            report = run()
            if profile:
                prof.disable()
            c1, t1, m1 = time.process_time(), time.perf_counter(), time.thread_time()
            assert report.ok, report
            gib = BLOCKS * SIZE / (1 << 30)
            lines.append(f"{name}{' (profiled)' if profile else ''}: {t1 - t0:.3f} s wall, "
                         f"{c1 - c0:.3f} s CPU ({(c1 - c0) / gib:.2f} s/GiB, "
                         f"{(c1 - c0) / BLOCKS * 1e3:.3f} ms per block); the calling "
                         f"thread {m1 - m0:.3f} s of it, awscrt's threads (C, and the "
                         f"Python it calls back) {(c1 - c0) - (m1 - m0):.3f} s")
            if profile:
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
                lines.append(text.getvalue().replace(str(ROOT) + "/", ""))
    assert np.array_equal(out, rows), "a block read back differs"
    return lines


def main() -> int:
    load = os.getloadavg()[0]
    server = RGWServer().start()
    try:
        ep = server.endpoints()
        s3 = boto3.client("s3", endpoint_url=ep["http_endpoint"], region_name="us-east-1",
                          aws_access_key_id=server.access_key,
                          aws_secret_access_key=server.secret_key)
        settings = S3Settings.resolve(endpoint_url=ep["http_endpoint"],
                                      access_key_id=server.access_key,
                                      secret_access_key=server.secret_key)
        lines = [__doc__.split("\n\n")[0], f"load average (1 min) at the start: {load:.2f}", ""]
        for i, profile in enumerate((False, True)):
            bucket = f"profile-{os.getpid()}-{i}"
            s3.create_bucket(Bucket=bucket)
            ns = Namespace(model_name="profile/library", tokens_per_hash=16, dtype="bfloat16")
            lines += job(f"s3://{bucket}/kv", ns, settings, profile)
    finally:
        server.stop()
    (HERE / "profile-library.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:8]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
