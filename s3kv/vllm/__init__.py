"""vLLM 0.33.0 integration: an S3 secondary tier for the ``OffloadingConnector``.

Configured as an out-of-tree tier of ``TieringOffloadingSpec``::

    "secondary_tiers": [{"type": "S3TierManager", "module_path": "s3kv.vllm",
                         "url": "s3://bucket/prefix", "endpoint_url": "http://minio:9000"}]

Only this module needs vLLM; ``import s3kv`` never imports it.
"""

from __future__ import annotations

from importlib import metadata

SUPPORTED_VLLM = "0.33.0"


def _check_vllm() -> None:
    try:
        version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        raise ImportError(
            f"s3kv.vllm needs vllm=={SUPPORTED_VLLM}, which is not installed; "
            f"pip install vllm=={SUPPORTED_VLLM} (s3kv itself works without vLLM)"
        ) from None
    # Local build tags (0.33.0+cpu, +cu129) ship the same Python API.
    if version.split("+", 1)[0] != SUPPORTED_VLLM:
        raise ImportError(
            f"s3kv.vllm supports vllm=={SUPPORTED_VLLM} only (its secondary-tier API is "
            f"experimental and changes between releases); found vllm {version}"
        )


_check_vllm()

from s3kv.vllm._tier import S3TierManager  # noqa: E402 - only after the version check

__all__ = ["SUPPORTED_VLLM", "S3TierManager"]
