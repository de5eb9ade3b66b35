"""The package a user installs: built as sdist and wheel, installed alone in a fresh venv.

The index's ``s3kv`` is an unrelated project, so this one is distributed as ``s3kv-vllm``
(issue 20): the import package and the command stay ``s3kv``. The wheel is built from the
sdist (as ``python -m build`` does), so a file missing from the sdist fails here too.
Built in-process through setuptools' PEP 517 hooks with what .venv already has (no
isolated build environment to fill); the fresh venv gets the wheel and its declared
dependencies only (from the pip cache or the registry).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.packaging, pytest.mark.venv]

ROOT = Path(__file__).resolve().parents[2]
DIST = "s3kv-vllm"
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", ".*cache", ".hypothesis", ".s3kv-test-artifacts", "build", "dist",
    "*.egg-info", "__pycache__", "tests", "bench", "terraform",
)

# What README.md and docs/library.md tell a user to import, run in the fresh venv.
DOCUMENTED = """
import json
from importlib import metadata

import s3kv
from s3kv import Downloader, Namespace, S3Settings, Uploader, make_offload_key

ns = Namespace(model_name="meta-llama/Llama-3.1-8B-Instruct", tokens_per_hash=16,
               dtype="bfloat16")
try:
    import s3kv.vllm  # noqa: F401  (needs vLLM, which this venv lacks)
    vllm_error = ""
except ImportError as exc:
    vllm_error = str(exc)
print(json.dumps({
    "version": s3kv.__version__,
    "dist_version": metadata.version("s3kv-vllm"),
    "owners": metadata.packages_distributions()["s3kv"],
    "module": s3kv.__file__,
    "folder": ns.folder,
    "key_len": len(make_offload_key(b"\\x01" * 32, 0)),
    "typed": (metadata.distribution("s3kv-vllm").locate_file("s3kv/py.typed")).is_file(),
    "vllm_error": vllm_error,
}))
"""


# Nothing from this checkout may leak in: with the checkout on PYTHONPATH, pip would find
# its s3kv_vllm.egg-info and call the wheel "already installed".
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _build(hook: str, source: Path, out: Path) -> Path:
    """Run one of setuptools' PEP 517 hooks in ``source``; the file it wrote."""
    out.mkdir(parents=True, exist_ok=True)
    code = f"from setuptools import build_meta; print(build_meta.{hook}({str(out)!r}))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=source, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("dist")
    source = tmp / "checkout"
    shutil.copytree(ROOT, source, ignore=COPY_IGNORE)  # keep build debris out of the tree
    sdist = _build("build_sdist", source, tmp / "dist")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "unpacked", filter="data")
    (unpacked,) = (tmp / "unpacked").iterdir()
    wheel = _build("build_wheel", unpacked, tmp / "dist")
    return sdist, wheel


# Its set-up is among the slowest steps of the suite, needed: a venv and an install are
# what a user's first minute is made of (dependencies from the index or pip's cache).
@pytest.fixture(scope="module")
def venv(built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site-packages) with the wheel and its dependencies only."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True,
                   timeout=120)
    python = where / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         str(built[1])],
        capture_output=True, text=True, timeout=600, env=CLEAN_ENV,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    return where


def test_the_distribution_is_named_s3kv_vllm_and_ships_the_package(
    built: tuple[Path, Path],
) -> None:
    sdist, wheel = built
    assert sdist.name.startswith("s3kv_vllm-") and sdist.name.endswith(".tar.gz")
    assert wheel.name.startswith("s3kv_vllm-") and wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = whl.read(meta).decode()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = whl.read(entry_points).decode()
    assert re.search(r"^Name: s3kv-vllm$", metadata, re.M), metadata[:500]
    # the library example's numpy comes with one extra, as docs/library.md says
    assert re.search(r"^Provides-Extra: numpy$", metadata, re.M)
    assert re.search(r'^Requires-Dist: numpy>=[\d.]+; extra == "numpy"$', metadata, re.M)
    assert "pip install '.[numpy]'" in (ROOT / "docs" / "library.md").read_text()
    assert "s3kv/py.typed" in names and "s3kv/vllm/__init__.py" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "scripts/"))]
    assert re.search(r"^s3kv = s3kv\.cli:console$", scripts, re.M), scripts


def test_the_wheel_alone_gives_the_command_and_the_documented_imports(
    venv: Path, tmp_path: Path
) -> None:
    bin_dir = venv / "bin"
    # from a directory that holds no s3kv source, so only the installed copy can answer
    version = subprocess.run([str(bin_dir / "s3kv"), "--version"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, env=CLEAN_ENV)
    assert version.returncode == 0, version.stderr
    ran = subprocess.run([str(bin_dir / "python"), "-c", DOCUMENTED], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env=CLEAN_ENV)
    assert ran.returncode == 0, ran.stderr
    facts = json.loads(ran.stdout)
    assert Path(facts["module"]).is_relative_to(venv)
    assert facts["owners"] == [DIST]
    assert facts["version"] == facts["dist_version"]
    assert version.stdout.strip() == f"s3kv {facts['version']} (pip install {DIST})"
    assert facts["folder"].startswith("meta-llama_Llama-3.1-8B-Instruct_")
    assert facts["key_len"] == 36 and facts["typed"] is True
    assert "vllm" in facts["vllm_error"]  # s3kv.vllm names what to install
    key = subprocess.run([str(bin_dir / "s3kv"), "key", "--help"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env=CLEAN_ENV)
    assert key.returncode == 0 and "usage: s3kv key" in key.stdout


def test_readme_installs_this_project_and_nothing_names_the_other_one() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "`pip install .`" in readme and DIST in readme  # from a checkout: this project
    texts = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("s3kv/**/*.py")]
    # `pip install s3kv` or 's3kv[demo]' would fetch the unrelated project of that name
    wrong = [(p.name, m) for p in texts
             for m in re.findall(r"pip install\s+(?:--?\S+\s+)*['\"]?s3kv\b(?!-)\S*",
                                 p.read_text())]
    assert not wrong, wrong
