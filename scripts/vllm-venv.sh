#!/usr/bin/env bash
# Build .venv-vllm: a Python 3.11 virtualenv with vLLM 0.33.0 (no dependency tree),
# a CPU torch, just the modules vllm.v1.kv_offload imports, NIXL (for vLLM's obj tier),
# the test tools and s3kv itself (editable). Used by the vLLM tier tests; CI runs it from .ci/run.
#
# Idempotent: a stamp inside the venv holds a hash of this script and of
# pyproject.toml; when both match, the script exits at once.
#
#   scripts/vllm-venv.sh            # create or update <repo>/.venv-vllm
#   VLLM_VENV=/path scripts/vllm-venv.sh
#   PYTHON=python3.11 scripts/vllm-venv.sh
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VLLM_VENV:-$repo/.venv-vllm}"
python="${PYTHON:-python3.11}"
stamp="$venv/.s3kv-vllm-stamp"

# Exact CPU build: "torch==2.13.0" alone could also match a CUDA wheel from PyPI, and
# anything that depends on torch must not upgrade it, so every pip call is constrained.
torch_pin="torch==2.13.0+cpu"
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
test_deps=(pytest pytest-timeout "moto[server]" hypothesis)

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
  echo "vllm-venv: $venv is up to date"
  exit 0
fi

echo "vllm-venv: building $venv"
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
if [[ -f "$repo/pyproject.toml" ]]; then
  "${pip[@]}" install --quiet -c "$constraints" -e "$repo"
else
  echo "vllm-venv: no $repo/pyproject.toml yet, s3kv not installed"
fi

# Fail loudly if a CUDA torch (or its nvidia-* wheels) slipped in.
"$venv/bin/python" - <<'EOF'
import importlib.metadata as md
import sys

import torch

cuda = sorted(d.metadata["Name"] for d in md.distributions()
              if d.metadata["Name"].lower().startswith("nvidia-"))
if torch.__version__ != "2.13.0+cpu" or cuda:
    sys.exit(f"vllm-venv: wrong torch {torch.__version__}, CUDA wheels: {cuda}")

import vllm  # noqa: F401
import xgrammar  # noqa: F401
import vllm.v1.kv_offload.tiering.base  # noqa: F401
import vllm.v1.kv_offload.tiering.fs.manager  # noqa: F401
import nixl._api  # noqa: F401
import vllm.v1.kv_offload.tiering.obj.manager  # noqa: F401
print(f"vllm-venv: torch {torch.__version__}, vllm {md.version('vllm')} ok")
EOF

want_stamp > "$stamp"
echo "vllm-venv: ready"
