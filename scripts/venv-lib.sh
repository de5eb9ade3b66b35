# Shared steps of the two vLLM virtualenv scripts (scripts/vllm-venv.sh, .venv-vllm;
# scripts/vllm-engine-venv.sh, .venv-vllm-engine): the stamp that makes them idempotent,
# the CPU torch pin every pip call is held to, s3kv installed editable, and the check that
# no CUDA build slipped in. Sourced, not run; the caller sets `name`, `venv` and `stamp`.

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3.11}"

# Exact CPU build: "torch==2.13.0" alone could also match a CUDA wheel from PyPI, and
# anything that depends on torch must not upgrade it, so every pip call is constrained.
torch_pin="torch==2.13.0+cpu"
# The test tools, held to the same pins as .venv's (pyproject.toml's extras: pytest <9.2,
# moto <6, ...), so a new release reaches the vLLM venvs when pyproject.toml lets it.
test_deps=(pytest pytest-timeout pytest-xdist "moto[server]" hypothesis)
if [[ -f "$repo/pyproject.toml" ]]; then
  mapfile -t test_deps < <("$python" - "$repo/pyproject.toml" "${test_deps[@]}" <<'EOF_PY'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    extras = tomllib.load(f)["project"]["optional-dependencies"]

def name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement)[0].lower()


pins = {name(spec): spec for group in extras.values() for spec in group}
for tool in sys.argv[2:]:
    print(pins.get(name(tool), tool))
EOF_PY
  )
  ((${#test_deps[@]} == 5)) || { echo "$name: no test tools read from pyproject.toml" >&2; exit 1; }
fi

# The stamp holds hashes of the calling script, this file and pyproject.toml.
want_stamp() {
  {
    sha256sum "$0" "${BASH_SOURCE[0]}" | cut -d' ' -f1
    if [[ -f "$repo/pyproject.toml" ]]; then
      sha256sum "$repo/pyproject.toml" | cut -d' ' -f1
    else
      echo "no-pyproject"
    fi
  }
}

# Exit at once when the venv is up to date; otherwise create it and start from the pin.
venv_begin() {
  if [[ -f "$stamp" && -x "$venv/bin/python" ]] && [[ "$(cat "$stamp")" == "$(want_stamp)" ]]; then
    echo "$name: $venv is up to date"
    exit 0
  fi
  echo "$name: building $venv"
  if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
  fi
  # Keep the venv out of git without touching the repo's .gitignore.
  echo '*' > "$venv/.gitignore"
  rm -f "$stamp"
  constraints="$venv/s3kv-constraints.txt"
  echo "$torch_pin" > "$constraints"
  # pip compiles every module's bytecode at install, and must: where Python runs with
  # PYTHONDONTWRITEBYTECODE=1 (the machine these runs were on does) a module pip did not
  # compile is compiled again by every process that imports it (a make test with
  # --no-compile here was stopped at half its main suite: bench/evidence/ci-run-2026-12-06.json).
  pip=("$venv/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" install --quiet --upgrade pip
}

venv_install_s3kv() {
  if [[ -f "$repo/pyproject.toml" ]]; then
    "${pip[@]}" install --quiet -c "$constraints" -e "$repo"
  else
    echo "$name: no $repo/pyproject.toml yet, s3kv not installed"
  fi
}

# Fail loudly if a CUDA torch (or its nvidia-* wheels) slipped in, then import what the
# venv is for (Python statements on stdin are appended to the check).
venv_check() {
  "$venv/bin/python" - "$name" "${torch_pin#torch==}" <<EOF_PY
import importlib.metadata as md
import sys

import torch

name, want = sys.argv[1], sys.argv[2]
cuda = sorted(d.metadata["Name"] for d in md.distributions()
              if d.metadata["Name"].lower().startswith("nvidia-"))
if torch.__version__ != want or cuda:
    sys.exit(f"{name}: wrong torch {torch.__version__}, CUDA wheels: {cuda}")
$(cat)
EOF_PY
}

venv_finish() {
  want_stamp > "$stamp"
  echo "$name: ready"
}
