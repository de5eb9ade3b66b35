"""``s3kv ls --prometheus``: what a location holds, for node_exporter's textfile collector.

Prometheus's text exposition format (version 0.0.4): bytes and blocks per namespace and
per time since last use, so a fleet graphs its bucket over time from a cron job::

    cd /var/lib/node_exporter/textfile_collector &&
      s3kv ls s3://b/kv --prometheus > s3kv.prom.tmp && mv s3kv.prom.tmp s3kv.prom

(the rename makes the file appear whole, as node_exporter's documentation asks). Every
series carries ``location``; namespace series also ``folder`` and ``model``, and the
split by last use ``last_use`` (``within_1h``, ``1h_to_1d``, ``1d_to_7d``, ``over_7d``:
the keys of ``ls --json``'s ``bytes_by_last_use``); tenant series ``tenant``.
docs/metrics.md lists them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from s3kv.ops.inventory import LAST_USE_BUCKETS, Inventory

PREFIX = "s3kv_cache_"

METRICS = {
    "bytes": "Bytes of KV-cache blocks at a location, by namespace and time since last use.",
    "blocks": "KV-cache blocks at a location, by namespace and time since last use.",
    "block_bytes": "A namespace's block size in bytes (its blocks' most common size).",
    "namespaces": "Namespaces directly under a location.",
    "tenant_bytes": "Bytes of KV-cache blocks of each tenant under a location "
    "(<location>/tenants/<tenant>).",
    "tenant_blocks": "KV-cache blocks of each tenant under a location.",
    "stray_keys": "Keys under a location outside vLLM's layout (see s3kv verify).",
    "listing_seconds": "How long s3kv ls took to list the location.",
    "listing_timestamp_seconds": "When s3kv ls listed the location (Unix time); alert "
    "when it stops advancing.",
}
"""Every metric printed (its name without :data:`PREFIX`), with its help text."""


def exposition(inv: Inventory, *, now: float | None = None) -> str:
    """The text a textfile collector reads: HELP and TYPE, then the samples, per metric."""
    now = time.time() if now is None else now
    where = {"location": inv.location}
    samples: dict[str, list[str]] = {name: [] for name in METRICS}
    for ns in inv.namespaces:
        labels = {**where, "folder": ns.folder, "model": ns.model}
        for bucket, _ in LAST_USE_BUCKETS:
            used = {**labels, "last_use": bucket}
            samples["bytes"].append(_sample("bytes", used, ns.bytes_by_last_use.get(bucket, 0)))
            samples["blocks"].append(
                _sample("blocks", used, ns.blocks_by_last_use.get(bucket, 0))
            )
        if ns.block_bytes is not None:
            samples["block_bytes"].append(_sample("block_bytes", labels, ns.block_bytes))
    samples["namespaces"].append(_sample("namespaces", where, len(inv.namespaces)))
    for t in inv.tenants:
        samples["tenant_bytes"].append(_sample("tenant_bytes", {**where, "tenant": t.tenant},
                                               t.bytes))
        samples["tenant_blocks"].append(_sample("tenant_blocks", {**where, "tenant": t.tenant},
                                                t.blocks))
    samples["stray_keys"].append(_sample("stray_keys", where, inv.stray_keys))
    samples["listing_seconds"].append(_sample("listing_seconds", where, round(inv.seconds, 3)))
    samples["listing_timestamp_seconds"].append(
        _sample("listing_timestamp_seconds", where, round(now, 3))
    )
    return "".join(_families(samples))


def _families(samples: Mapping[str, list[str]]) -> Iterator[str]:
    for name, help_text in METRICS.items():
        yield f"# HELP {PREFIX}{name} {_escape_help(help_text)}\n"
        yield f"# TYPE {PREFIX}{name} gauge\n"
        for line in samples[name]:
            yield line + "\n"


def _sample(name: str, labels: Mapping[str, str], value: float) -> str:
    pairs = ",".join(f'{key}="{_escape_label(text)}"' for key, text in labels.items())
    return f"{PREFIX}{name}{{{pairs}}} {value}"


def _escape_label(text: str) -> str:
    """A label value as the format wants it: backslash, double quote and line feed
    escaped (folder and model names come from a bucket anyone may have written to), and
    bytes that are no UTF-8 (surrogates) spelled out rather than written raw."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")
