"""What a batch costs on the blocking data paths, before and after one job type (issue 30):
the worker loop (a pool task per worker, each popping blocks) against the one job the
awscrt path already used (a window of attempts, each request a pool task), per block.

    python bench/evidence/one_job_type.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 7]
        [--cases botocore,directory,crt]

Each round runs one process per checkout, in turn (interleaved; each checkout goes
first in every other round). Cases:

* ``botocore``: one batch of 2,000 blocks of 4 KiB uploaded, then downloaded into rows,
  then downloaded as bytes, with boto3 (``data_path="botocore"``) against moto's server on
  loopback (one server for both checkouts, started here). The thousands-of-small-blocks
  case the worker loop was chosen for.
* ``directory``: the vLLM tier's shape on a directory: 300 jobs of 8 blocks stored, then
  loaded into rows (per-job costs show here), and one job of 2,400 blocks loaded.
* ``crt``: the same 300 jobs of 8 blocks, stored and loaded on awscrt (the tier's
  default data path) against the moto server: what the job costs around awscrt.

Prints the child's CPU microseconds per block (``time.process_time``: the client's own
cost, not the server's) and wall microseconds per block, median over rounds (min-max),
and the new/old ratio of CPU per block taken within each round (the two processes of a
round run back to back, so a slow spell of this shared machine weighs on both), median
(min-max). Writes ``one-job-type.json`` beside this file (``one-job-type-CASES.json``
for a subset of the cases).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.evidence.hook_vs_wrappers import quiet_load
from bench.lib.moto_server import MotoServer

CHILD = r"""
import json, os, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import boto3, numpy as np
from s3kv import Downloader, Namespace, S3Settings, Uploader, make_offload_key
import s3kv
assert s3kv.__file__.startswith(sys.argv[1]), s3kv.__file__
endpoint, tag = sys.argv[2], sys.argv[3]
SIZE = 4096
ns = Namespace(model_name="m", tokens_per_hash=16, dtype="bfloat16", tp_size=1,
               kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])

def keys(n, salt):
    return [make_offload_key(((salt * 1_000_003 + i).to_bytes(8, "big")) * 4, 0)
            for i in range(n)]

def timed(fn):
    c, w = time.process_time(), time.perf_counter()
    report = fn()
    return report, time.process_time() - c, time.perf_counter() - w

def small_jobs(label, up, down, small, rows8):
    # the vLLM tier's shape: jobs of 8 blocks stored, then loaded into rows
    def stores():
        for batch in small:
            r = up.put_blocks({k: b"s" * SIZE for k in batch}); assert r.ok, r.failed
    _, c, w = timed(stores)
    out[f"{label} 300 jobs x 8, store"] = (c, w, 2400)
    def loads():
        for batch in small:
            r = down.get_blocks(batch, into=rows8); assert r.ok and len(r.done) == 8
    _, c, w = timed(loads)
    out[f"{label} 300 jobs x 8, load"] = (c, w, 2400)

out = {}
cases = sys.argv[4].split(",")
settings = S3Settings.resolve({}, endpoint_url=endpoint, data_path="botocore",
                              access_key_id="x", secret_access_key="x", region="us-east-1")
if "botocore" in cases:
    ks = keys(2000, hash(tag) & 0xFFFF)
    rows = np.zeros((len(ks), SIZE), dtype=np.uint8)
    payload = {k: bytes([i % 251]) * SIZE for i, k in enumerate(ks)}
    with Uploader(f"s3://bench/{tag}", ns, settings=settings) as up, \
            Downloader(f"s3://bench/{tag}", ns, settings=settings) as down:
        up.put_blocks({k: b"w" * SIZE for k in keys(8, 7)})  # connections and imports warm
        down.get_blocks(keys(8, 7))
        r, c, w = timed(lambda: up.put_blocks(payload))
        assert len(r.done) == len(ks), r.failed
        out["botocore put"] = (c, w, len(ks))
        r, c, w = timed(lambda: down.get_blocks(ks, into=rows))
        assert len(r.done) == len(ks) and rows[5, 0] == 5, r.failed
        out["botocore get into rows"] = (c, w, len(ks))
        r, c, w = timed(lambda: down.get_blocks(ks))
        assert len(r.done) == len(ks) and r.data[ks[9]][:1] == bytes([9]), r.failed
        out["botocore get bytes"] = (c, w, len(ks))

if "directory" in cases:
    root = tempfile.mkdtemp()
    small = [keys(8, 100 + j) for j in range(300)]
    rows8 = np.zeros((8, SIZE), dtype=np.uint8)
    with Uploader(root, ns) as up, Downloader(root, ns) as down:
        up.put_blocks({k: b"w" * SIZE for k in keys(8, 99)})
        down.get_blocks(keys(8, 99), into=rows8)
        small_jobs("directory", up, down, small, rows8)
        big = [k for batch in small for k in batch][:2400]
        bigrows = np.zeros((len(big), SIZE), dtype=np.uint8)
        r, c, w = timed(lambda: down.get_blocks(big, into=bigrows))
        assert r.ok and len(r.done) == len(big)
        out["directory 1 job x 2400, load"] = (c, w, len(big))
if "crt" in cases:
    crt = settings.model_copy(update={"data_path": "crt"})
    small = [keys(8, 5000 + j) for j in range(300)]
    rows8 = np.zeros((8, SIZE), dtype=np.uint8)
    with Uploader(f"s3://bench/{tag}-crt", ns, settings=crt) as up, \
            Downloader(f"s3://bench/{tag}-crt", ns, settings=crt) as down:
        up.put_blocks({k: b"w" * SIZE for k in keys(8, 7)})
        down.get_blocks(keys(8, 7), into=rows8)
        small_jobs("crt", up, down, small, rows8)
print(json.dumps({k: {"cpu_us": c / n * 1e6, "wall_us": w / n * 1e6}
                  for k, (c, w, n) in out.items()}))
"""


def main() -> None:
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 7
    chosen = sys.argv[sys.argv.index("--cases") + 1] if "--cases" in sys.argv else ""
    load = quiet_load()
    variants = (("before: two job types", old), ("after: one job type", new))
    runs: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name, _ in variants}
    server = MotoServer()  # idle unless the botocore case runs
    try:
        import boto3

        boto3.client("s3", endpoint_url=server.url, aws_access_key_id="x",
                     aws_secret_access_key="x", region_name="us-east-1").create_bucket(
            Bucket="bench")
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(rounds):
                # Each checkout goes first in every other round: the second process of a
                # round meets a server that holds the first one's objects.
                for name, repo in variants[:: 1 if r % 2 == 0 else -1]:
                    out = subprocess.run(
                        [sys.executable, "-c", CHILD, str(Path(repo).resolve()), server.url,
                         f"r{r}-{name.split()[0]}", chosen or "botocore,directory,crt"],
                        capture_output=True, text=True, cwd=tmp, check=False)
                    if out.returncode:
                        raise SystemExit(out.stderr)
                    runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        server.stop()
    cases = list(runs[variants[0][0]][0])
    table: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{'case':<32} {'variant':<22} {'CPU us/block':>20} {'wall us/block':>22}"
          f" {'CPU new/old':>20}")
    (old_name, _), (new_name, _) = variants
    for case in cases:
        ratios = [n[case]["cpu_us"] / o[case]["cpu_us"]
                  for o, n in zip(runs[old_name], runs[new_name])]
        ratio = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
        for name, _ in variants:
            row = {}
            for field in ("cpu_us", "wall_us"):
                xs = [got[case][field] for got in runs[name]]
                row[field] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
            table.setdefault(case, {})[name] = row
            cells = [f"{row[f]['median']:.1f} ({row[f]['min']:.1f}-{row[f]['max']:.1f})"
                     for f in ("cpu_us", "wall_us")]
            paired = (f"{ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})"
                      if name == new_name else "")
            print(f"{case:<32} {name:<22} {cells[0]:>20} {cells[1]:>22} {paired:>20}")
        table[case]["cpu_new_over_old_per_round"] = ratio  # type: ignore[assignment]
    result = {"what": __doc__.split("\n\n")[0], "rounds": rounds, "old": old, "new": new,
              "order": "each checkout first in every other round",
              "load_average_at_start": load, "results": table, "runs": runs}
    out = f"one-job-type-{chosen.replace(',', '-')}.json" if chosen else "one-job-type.json"
    Path(__file__).with_name(out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
