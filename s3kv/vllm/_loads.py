"""The tier's loads: what a load meets that the tier acts on.

* **A block whose checksum fails** (read twice: it may have been damaged in flight) is
  counted (``integrity_failures{kind="checksum"}``) and its ETag remembered, so the next
  store of that key, the recompute's, replaces exactly that copy
  (:attr:`s3kv.transfers.uploader.Uploader.damaged`, ``If-Match``) instead of finding
  the key present: every later hit would pay for the damage again.
* **A block stored without a recorded checksum** (vLLM's obj tier writes them; its bytes
  are only size-checked) is counted (``unverified_blocks{outcome="loaded"}``) and said
  once in the log. With the tier option ``require_checksum`` it is refused instead
  (``outcome="refused"``): the block fails, its row is zeroed and vLLM recomputes it.

The tier checked the manifest when it started: a load never reads it again (a read on the
dispatch thread would wait on the network).
"""

from __future__ import annotations

import logging
from typing import Any

from s3kv.errors import ChecksumMismatchError, IntegrityError
from s3kv.stores import ObjectInfo
from s3kv.transfers.downloader import Downloader
from s3kv.transfers.jobs import BlockResult
from s3kv.vllm._metrics import INTEGRITY_FAILURES, UNVERIFIED_BLOCKS, TierMeter

logger = logging.getLogger("s3kv.vllm")

MAX_DAMAGED = 10_000
"""Damaged copies remembered at once (more are left for a later load to find)."""


class MeteredDownloader(Downloader):
    """The tier's loads (see the module)."""

    def __init__(
        self,
        *args: Any,
        meter: TierMeter,
        damaged: dict[str, str] | None = None,
        require_checksum: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.meter = meter
        self.damaged = damaged if damaged is not None else {}
        self.require_checksum = require_checksum
        self._told = False

    def _check_manifest(self) -> None:
        """Checked once, by the tier, when it started."""

    def _loaded(
        self,
        key: bytes,
        object_key: str,
        view: memoryview,
        info: ObjectInfo,
        where: str,
        data: bytes | None = None,
    ) -> BlockResult:
        unverified = info.checksum is None and not self.store.is_local
        if unverified and self.require_checksum:
            self.meter.count(UNVERIFIED_BLOCKS, "refused")
            self._tell()
            raise IntegrityError(
                f"{where}: stored without a checksum (as vLLM's obj tier writes blocks), "
                "so its bytes cannot be verified; refused (require_checksum)"
            )
        try:
            result = super()._loaded(key, object_key, view, info, where, data)
        except ChecksumMismatchError:
            self.meter.count(INTEGRITY_FAILURES, "checksum")
            if info.etag and len(self.damaged) < MAX_DAMAGED:
                self.damaged[object_key] = info.etag.strip('"')  # If-Match goes bare (RGW)
            raise
        if unverified:
            self.meter.count(UNVERIFIED_BLOCKS, "loaded")
            self._tell()
        return result

    def _tell(self) -> None:
        if self._told:
            return
        self._told = True
        if self.require_checksum:
            logger.warning(
                "s3kv tier: refused a block stored without a checksum (%s); such blocks "
                "(vLLM's obj tier writes them) are recomputed while require_checksum is set",
                self.location.url,
            )
        else:
            logger.warning(
                "s3kv tier: loaded a block stored without a checksum from %s: its bytes "
                "are size-checked only (vLLM's obj tier writes such blocks); set "
                "require_checksum to refuse them (unverified_blocks counts them)",
                self.location.url,
            )
