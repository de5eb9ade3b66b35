"""The tier's loads: what a load meets that the tier acts on, noted for EngineCore's side.

* **A block whose checksum fails** (read twice: it may have been damaged in flight) is
  noted ``damaged`` with its ETag: the tier counts it (``integrity_failures{kind=
  "checksum"}``) and the next store of that key, the recompute's, replaces exactly that
  copy (``If-Match``, :attr:`s3kv.worker.orders.Order.replace`) instead of finding the
  key present: every later hit would pay for the damage again.
* **A block stored without a recorded checksum** (vLLM's obj tier writes them; its bytes
  are only size-checked) is noted ``unverified``; with the tier option
  ``require_checksum`` it is refused instead (``unverified_refused``): the block fails,
  its row is zeroed and vLLM recomputes it.

The tier checked the manifest when it started: a load never reads it again.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from s3kv.errors import ChecksumMismatchError, IntegrityError
from s3kv.stores import ObjectInfo
from s3kv.transfers.downloader import Downloader
from s3kv.transfers.jobs import BlockResult
from s3kv.worker.orders import Note


class TierDownloader(Downloader):
    """The tier's loads (see the module); what they meet goes to ``notes``."""

    def __init__(self, *args: Any, notes: deque[Note], damaged: dict[str, str],
                 require_checksum: bool = False, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)
        self.notes = notes
        self.damaged = damaged
        """Shared with the data path's uploader: a damaged copy found here is replaced
        by the next store of its key, even before EngineCore's side orders it."""
        self.require_checksum = require_checksum

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
            self.notes.append(Note("unverified_refused", object_key))
            raise IntegrityError(
                f"{where}: stored without a checksum (as vLLM's obj tier writes blocks), "
                "so its bytes cannot be verified; refused (require_checksum)"
            )
        try:
            result = super()._loaded(key, object_key, view, info, where, data)
        except ChecksumMismatchError:
            etag = (info.etag or "").strip('"')  # If-Match goes bare (RGW)
            if etag:
                self.damaged[object_key] = etag
            self.notes.append(Note("damaged", object_key, etag))
            raise
        if unverified:
            self.notes.append(Note("unverified", object_key))
        return result
