"""The vLLM tier tests need vLLM 0.33.0: fail loudly (never skip) when it is missing."""

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


@pytest.mark.parametrize(
    ("fake", "expected"),
    [
        ("raise metadata.PackageNotFoundError(name)", "needs vllm==0.33.0, which is not installed"),
        ("return '0.32.1'", "supports vllm==0.33.0 only"),
    ],
)
def test_import_s3kv_vllm_names_the_supported_version(fake: str, expected: str) -> None:
    proc = _import_in_subprocess(
        "from importlib import metadata\n"
        "real = metadata.version\n"
        "def version(name):\n"
        f"    if name == 'vllm': {fake}\n"
        "    return real(name)\n"
        "metadata.version = version\n"
        "try:\n"
        "    import s3kv.vllm\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('imported')\n"
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert expected in proc.stdout
