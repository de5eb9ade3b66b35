"""bench_renewal.py --drain N: copies per block and drain time for N due blocks.

What a fleet pays for renewal when many blocks come due at once. A writer tier stores N
blocks; once they are all due, tiers with renewal on (vLLM's own factory builds them)
load them all:

* ``one tier, two loads``: one tier loads the N blocks twice in a row, within
  ``renew_after``: every block is due at the first load, and the second finds its
  renewal queued or done. At most one copy per block is the target (the issue measured
  3.9 copies per block and 200 s of draining before round 2).
* ``two tiers at once``: two tiers load the same N blocks at the same moment, as two
  nodes of a fleet serving one shared prompt. Each looks (a HEAD) at a spread instant
  before copying; the copy's condition stops a second renewal where the store enforces
  it (Ceph RGW, AWS). At most 1.1 copy requests per block is the target (the issue
  measured 2).

Drain time: from the first load's submit until the last renewal finished (the tiers'
``Renewer.flush``). Copies: the copy requests the tiers sent (their ``requests``
metric, ``copy`` operation, any outcome), per block.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from typing import Any

KiB = 1024
SCENARIOS = ("one tier, two loads", "two tiers at once")


def _copies(tier: Any) -> int:
    from s3kv.vllm._metrics import REQUESTS

    stats = tier.get_stats()
    data = stats.data["data"].get(REQUESTS, {}) if stats is not None else {}
    return int(sum(v for labels, v in data.items() if labels[1] == "copy"))


def _wait(tier: Any, submit: Any, job: Any) -> None:
    submit(job)
    while True:
        done = list(tier.get_finished_jobs())
        if done:
            assert done[0].success, done
            return
        time.sleep(0.001)


def drain_rows(server: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per scenario on ``server`` (see the module)."""
    import numpy as np

    from tests.vllm import harness as h

    n, row_bytes = args.drain, args.drain_block_kib * KiB
    bucket = f"bench-drain-{uuid.uuid4().hex[:8]}"
    server.client.create_bucket(Bucket=bucket)
    spec = h.spec(row_bytes=row_bytes, chunks=n, engine_id=f"bench-{bucket}")
    made: list[tuple[Any, Any]] = []

    def tier() -> Any:
        view, rows = h.primary_view(n, row_bytes)
        t = h.s3_tier(view, spec, url=f"s3://{bucket}/bench", endpoint_url=server.endpoint,
                      concurrency=args.threads, max_attempts=8, access_key_id=server.access,
                      secret_access_key=server.secret, ca_bundle=server.ca,
                      renew_after=args.drain_renew_after)
        made.append((t, rows))
        return t

    rows_out = []
    try:
        writer = tier()
        rng = np.random.default_rng(n)
        for s, scenario in enumerate(SCENARIOS):
            keys = h.keys(n, start=7_000_000 + s * n)
            made[0][1][:] = rng.integers(-128, 128, (n, row_bytes), np.int8)
            _wait(writer, writer.submit_store, h.job(keys, range(n), load=False))
            time.sleep(args.drain_renew_after + 1.1)  # every block is due
            readers = [tier()] if s == 0 else [tier(), tier()]
            loads = [(readers[0], "a"), (readers[0], "b")] if s == 0 else [
                (r, f"r{i}") for i, r in enumerate(readers)]
            started = time.perf_counter()
            if s == 0:
                for r, name in loads:
                    _wait(r, r.submit_load, h.job(keys, range(n), load=True, req=name))
            else:
                threads = [threading.Thread(target=_wait, args=(
                    r, r.submit_load, h.job(keys, range(n), load=True, req=name)))
                    for r, name in loads]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            for r in readers:
                assert r.renewer.flush(600), "renewals did not drain in 10 minutes"
            drained = time.perf_counter() - started
            copies = sum(_copies(r) for r in readers)
            rows_out.append({
                "server": server.name, "scenario": scenario, "blocks": n,
                "block_bytes": row_bytes, "copies": copies, "copies_per_block": copies / n,
                "drain_s": drained,
                "renewed": sum(r.renewer.renewed for r in readers),
                "already_renewed": sum(r.renewer.already_renewed for r in readers),
                "failed": sum(r.renewer.failed for r in readers),
                "spread_s": readers[0].renewer.queue.spread,
            })
            print(f"| {server.name:<9} | {scenario:<19} | {n} blocks | "
                  f"{copies / n:.2f} copies/block | drained in {drained:.1f}s |", flush=True)
    finally:
        for t, _ in made:
            t.shutdown()
    return rows_out


def drain_markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    out = [
        f"{meta['drain']:,} due blocks of {meta['drain_block_kib']:,} KiB loaded by tiers "
        f"with renewal on (`renew_after` {meta['drain_renew_after']:g} s, so renewals "
        "start within a spread of a tenth of it), from the first load's submit until the "
        "last renewal finished.",
        "",
        "| server | scenario | copies per block | drain s | renewed | already renewed "
        "| failed |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for r in doc["drain"]:
        out.append(
            f"| {r['server']} | {r['scenario']} | {r['copies_per_block']:.2f} | "
            f"{r['drain_s']:.1f} | {r['renewed']:,} | {r['already_renewed']:,} | "
            f"{r['failed']} |")
    from bench.lib import trust as _trust

    notes = _trust.notes(doc)
    return "\n".join(out + (["", *notes] if notes else []))
