"""Non-blocking lookups: vLLM's AsyncLookupManager answered by concurrent HEADs."""

from __future__ import annotations

from collections.abc import Iterable

from vllm.v1.kv_offload.base import OffloadKey, ReqContext
from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager

from s3kv.downloader import Downloader


class S3AsyncLookupManager(AsyncLookupManager):  # type: ignore[misc]
    """One step's keys of a request, probed on vLLM's lookup thread.

    ``Downloader.contains`` sends the HEADs concurrently and remembers the answers
    (present for good, absent for a couple of seconds), so a chain's second lookup
    costs no request.

    ``heads_sent`` and ``cache_answers`` are running totals (read by the tier's metrics):
    HEADs sent, and answers served from the presence cache without a request.
    """

    def __init__(self, downloader: Downloader, tier_type: str) -> None:
        super().__init__(tier_type=tier_type)
        self._downloader = downloader
        self.heads_sent = 0
        self.cache_answers = 0

    def batch_lookup(self, keys: list[OffloadKey], req_context: ReqContext) -> Iterable[bool]:
        # An exception here makes vLLM log it and answer MISS for the whole batch.
        # Only vLLM's one lookup thread calls this, so the totals need no lock.
        sent_before = self._downloader._requests
        answers = self._downloader.contains(keys)
        sent = self._downloader._requests - sent_before
        self.heads_sent += sent
        self.cache_answers += len(keys) - sent
        return answers
