"""Read-only tiers, and the gate every store passes: what the tier declines to store.

A read-only tier (consumers of a cache another cluster writes, holding reader rights)
sends no write request at all. At start it reads the manifest, which must exist and
match (a reader cannot write one). Stores never become jobs: the tier's back-pressure
detector (:class:`StoreGate`) declines every one, which is vLLM's own "skipped store" path
(``TieringOffloadingManager._should_store_to_tier``): no row is pinned, nothing is
logged, no block is reported stored. The same gate declines stores while the store's
breaker is open or writes are paused after a refused one (:mod:`s3kv.vllm._health`). A
store job that arrives anyway is answered at the next poll as failed, with no bytes and no
time (:meth:`s3kv.vllm._runner.JobRunner.refuse`): a failed store leaves no object, which
is the truth, and unlike a success it neither counts as bytes written nor emits a KV
event.
"""

from __future__ import annotations

from collections.abc import Callable

from vllm.v1.kv_offload.tiering.backpressure import BackpressureDetector, DropStorePolicy

from s3kv.errors import AccessDeniedError, ManifestMismatchError, ManifestMissingError, S3KVError
from s3kv.transfers.downloader import Downloader


class StoreGate(BackpressureDetector):  # type: ignore[misc]
    """Declines a store when ``declines()`` gives a reason (``on_skip(num_blocks,
    reason)`` counts it); otherwise asks ``inner``, the detector vLLM built from the tier
    entry's ``backpressure``, if any (and forwards it everything vLLM tells a detector).
    """

    def __init__(
        self,
        declines: Callable[[], str | None],
        on_skip: Callable[[int, str], None],
        inner: BackpressureDetector | None = None,
    ) -> None:
        # Without an inner detector, DropStorePolicy is never consulted, so vLLM's
        # "dropped by back-pressure" counters stay at zero: these stores are declined by
        # the tier's own rule, and s3kv's metrics count them.
        super().__init__(policy=inner.policy if inner is not None else DropStorePolicy())
        self._declines = declines
        self._on_skip = on_skip
        self.inner = inner

    def should_store(self, num_blocks: int) -> bool:
        why = self._declines()
        if why is not None:
            self._on_skip(num_blocks, why)
            return False
        return self.inner is None or bool(self.inner.should_store(num_blocks))

    def on_store_completed(self, elapsed_s: float, num_bytes: int) -> None:
        if self.inner is not None:
            self.inner.on_store_completed(elapsed_s, num_bytes)

    def on_store_failed(self) -> None:
        if self.inner is not None and hasattr(self.inner, "on_store_failed"):
            self.inner.on_store_failed()

    def update(self, submit_time: float, num_bytes: int) -> None:
        if self.inner is not None:
            self.inner.update(submit_time, num_bytes)

    def is_under_pressure(self) -> bool:
        return self.inner is not None and bool(self.inner.is_under_pressure())

    def reset(self) -> None:
        if self.inner is not None:
            self.inner.reset()

    @property
    def stats(self) -> dict[str, float]:
        return dict(self.inner.stats) if self.inner is not None else {}


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
