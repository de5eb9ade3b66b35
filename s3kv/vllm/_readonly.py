"""Read-only tiers: consumers of a cache another cluster writes, holding reader rights.

A read-only tier sends no write request at all. At start it reads the manifest, which
must exist and match (a reader cannot write one). Stores never become jobs: the tier's
back-pressure detector declines every one, which is vLLM's own "skipped store" path
(``TieringOffloadingManager._should_store_to_tier``): no row is pinned, nothing is
logged, no block is reported stored. A store job that arrives anyway is answered at the
next poll as failed, with no bytes and no time: a failed store leaves no object, which is
the truth, and unlike a success it neither counts as bytes written nor emits a KV event.
"""

from __future__ import annotations

import queue
from collections.abc import Callable

from vllm.v1.kv_offload.tiering.backpressure import BackpressureDetector, DropStorePolicy
from vllm.v1.kv_offload.tiering.base import JobResult, TransferJob

from s3kv.errors import AccessDeniedError, ManifestMismatchError, ManifestMissingError, S3KVError
from s3kv.transfers.downloader import Downloader


class ReadOnlyDetector(BackpressureDetector):  # type: ignore[misc]
    """Declines every store; ``on_skip(num_blocks)`` counts what was declined."""

    def __init__(self, on_skip: Callable[[int], None] | None = None) -> None:
        # DropStorePolicy is never consulted, so vLLM's "dropped by back-pressure"
        # counters stay at zero: these stores are skipped by design, not under pressure.
        super().__init__(policy=DropStorePolicy())
        self._on_skip = on_skip

    def should_store(self, num_blocks: int) -> bool:
        if self._on_skip is not None:
            self._on_skip(num_blocks)
        return False

    def on_store_completed(self, elapsed_s: float, num_bytes: int) -> None:
        """No store ever completes."""

    def is_under_pressure(self) -> bool:
        return False

    def reset(self) -> None:
        """Nothing to reset."""


class SkippedStores:
    """Answers store jobs without I/O: failed, zero bytes, at the next poll."""

    def __init__(self) -> None:
        self._answers: queue.SimpleQueue[JobResult] = queue.SimpleQueue()

    def answer(self, job: TransferJob) -> None:
        self._answers.put(JobResult(job.job_id, False, None, 0.0, 0))

    def take(self) -> list[JobResult]:
        out = []
        while True:
            try:
                out.append(self._answers.get_nowait())
            except queue.Empty:
                return out


def check_manifest(downloader: Downloader, *, tier_type: str) -> None:
    """The manifest must exist and hash to the namespace's digest (read, never written)."""
    key = downloader.keys.config_key()
    where = downloader.url_for(key)
    missing = ManifestMissingError(
        f"read-only s3kv tier {tier_type!r}: {where} does not exist. A read-only tier "
        "never writes the manifest; start the producer's tier (or `s3kv push`) on this "
        "location first, and check that both use the same model, dtype, tokens_per_hash, "
        "blocks_per_chunk and layer names (they name the folder)"
    )
    try:
        downloader.verify_manifest()
    except ManifestMissingError:
        raise missing from None
    except ManifestMismatchError as exc:
        raise ManifestMismatchError(f"read-only s3kv tier {tier_type!r}: {exc}") from None
    except AccessDeniedError as exc:
        # S3 answers 403 for a missing key to whoever may not list it; the reader
        # policy may list the prefix, so a listing tells "missing" from "forbidden".
        try:
            listed = any(info.key == key for info in downloader.store.list(key))
        except S3KVError:
            listed = True
        if not listed:
            raise missing from None
        raise AccessDeniedError(f"read-only s3kv tier {tier_type!r}: {exc}") from None
