#!/usr/bin/env bash
# Build .venv-vllm: a Python 3.11 virtualenv with vLLM 0.33.0 (no dependency tree),
# a CPU torch, just the modules vllm.v1.kv_offload imports, NIXL (for vLLM's obj tier),
# the test tools and s3kv itself (editable). Used by the vLLM tier tests (tests/vllm).
#
# Idempotent: a stamp inside the venv holds a hash of this script, scripts/venv-lib.sh
# (the steps it shares with vllm-engine-venv.sh) and pyproject.toml; when they match,
# the script exits at once.
#
#   scripts/vllm-venv.sh            # create or update <repo>/.venv-vllm
#   VLLM_VENV=/path scripts/vllm-venv.sh
#   PYTHON=python3.11 scripts/vllm-venv.sh
set -euo pipefail

name=vllm-venv
source "$(dirname "${BASH_SOURCE[0]}")/venv-lib.sh"
venv="${VLLM_VENV:-$repo/.venv-vllm}"
stamp="$venv/.s3kv-vllm-stamp"

vllm_pin="vllm==0.33.0"
# What vllm.v1.kv_offload (and its tiering package) imports, found by trial.
vllm_runtime_deps=(
  numpy packaging msgspec psutil pyzmq urllib3 regex transformers cbor2 aiohttp
  requests openai-harmony openai pillow pybase64 cachetools cloudpickle uvloop
  py-cpuinfo prometheus_client fastapi partial_json_parser llguidance
)
# xgrammar is installed without its dependencies: they pull in triton (1 GB), which
# vllm.v1.kv_offload never needs; typing-extensions comes with torch.
no_deps_extra=(xgrammar apache-tvm-ffi)
# vLLM's own object-store tier (tiering/obj) reaches S3 through NIXL's OBJ plugin (the AWS
# C++ SDK); the interop tests and bench/bench_vllm_tier.py run it. The `nixl` wrapper picks
# nixl_cu12 when it finds no CUDA; --no-deps keeps pip from pulling a CUDA torch.
nixl_pins=(nixl-cu12==1.5.1 nixl==1.5.1)

venv_begin
"${pip[@]}" install --quiet -c "$constraints" "$torch_pin"
"${pip[@]}" install --quiet --no-deps "$vllm_pin"
# Hold everything else to vLLM's own pins (all but torch: its 2.14.0 has no CPU wheel
# here), so the venv matches what vLLM was released against.
"${pip[@]}" install --quiet -c "$constraints" packaging
"$venv/bin/python" - "$constraints" <<'PY'
import importlib.metadata as md
import sys

from packaging.requirements import Requirement

with open(sys.argv[1], "a") as out:
    for line in md.requires("vllm") or []:
        req = Requirement(line)
        if req.name == "torch" or (req.marker and "extra" in str(req.marker)):
            continue
        marker = f"; {req.marker}" if req.marker else ""
        out.write(f"{req.name}{req.specifier}{marker}\n")
PY
"${pip[@]}" install --quiet -c "$constraints" "${vllm_runtime_deps[@]}" "${test_deps[@]}"
"${pip[@]}" install --quiet -c "$constraints" --no-deps "${no_deps_extra[@]}"
"${pip[@]}" install --quiet -c "$constraints" --no-deps "${nixl_pins[@]}"
venv_install_s3kv

venv_check <<'PY'
import vllm  # noqa: F401
import xgrammar  # noqa: F401
import vllm.v1.kv_offload.tiering.base  # noqa: F401
import vllm.v1.kv_offload.tiering.fs.manager  # noqa: F401
import nixl._api  # noqa: F401
import vllm.v1.kv_offload.tiering.obj.manager  # noqa: F401
print(f"vllm-venv: torch {torch.__version__}, vllm {md.version('vllm')} ok")
PY
venv_finish
