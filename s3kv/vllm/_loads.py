"""What the data path's loads and writes met, acted on in EngineCore's process.

The data path decides (:mod:`s3kv.worker.loads`: a block whose checksum fails twice is
failed and its copy noted damaged; one stored without a checksum is loaded size-checked,
or refused under ``require_checksum``); here the tier counts and remembers it:

* ``damaged``: ``integrity_failures{kind="checksum"}``, and the copy's ETag kept in the
  tenant's damaged copies (:attr:`s3kv.transfers.uploader.Uploader.damaged`), so the
  next store of that key, the recompute's, is ordered to replace exactly that copy
  (``If-Match``) and the presence cache stops calling it present;
* ``unverified`` / ``unverified_refused``: ``unverified_blocks{outcome="loaded"}`` or
  ``{outcome="refused"}``, said once in the log;
* ``write_refused``: the store's health pauses stores (:mod:`s3kv.vllm._health`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from s3kv.vllm._metrics import INTEGRITY_FAILURES, UNVERIFIED_BLOCKS, TierMeter
from s3kv.worker.orders import Note

logger = logging.getLogger("s3kv.vllm")

MAX_DAMAGED = 10_000
"""Damaged copies remembered at once (more are left for a later load to find)."""


class LoadNotes:
    """The tier's side of :class:`~s3kv.worker.orders.Note` s (see the module)."""

    def __init__(self, meter: TierMeter, *, url: str, require_checksum: bool,
                 writes_refused: Callable[[str], None]) -> None:  # fmt: skip
        self.meter = meter
        self.url = url
        self.require_checksum = require_checksum
        self._writes_refused = writes_refused
        self._told = False

    def on_notes(self, notes: Iterable[Note], damaged: dict[str, str]) -> None:
        """``damaged``: the copies known damaged under the job's tenant's prefix."""
        for note in notes:
            if note.kind == "damaged":
                self.meter.count(INTEGRITY_FAILURES, "checksum")
                if note.detail and len(damaged) < MAX_DAMAGED:
                    damaged[note.object_key] = note.detail
            elif note.kind == "unverified":
                self.meter.count(UNVERIFIED_BLOCKS, "loaded")
                self._tell()
            elif note.kind == "unverified_refused":
                self.meter.count(UNVERIFIED_BLOCKS, "refused")
                self._tell()
            elif note.kind == "write_refused":
                self._writes_refused(note.detail)

    def _tell(self) -> None:
        if self._told:
            return
        self._told = True
        if self.require_checksum:
            logger.warning(
                "s3kv tier: refused a block stored without a checksum (%s); such blocks "
                "(vLLM's obj tier writes them) are recomputed while require_checksum is set",
                self.url,
            )
        else:
            logger.warning(
                "s3kv tier: loaded a block stored without a checksum from %s: its bytes "
                "are size-checked only (vLLM's obj tier writes such blocks); set "
                "require_checksum to refuse them (unverified_blocks counts them)",
                self.url,
            )
