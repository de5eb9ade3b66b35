#!/usr/bin/env bash
# Install what the Ceph RADOS Gateway test server (tests/servers/rgw.py) needs:
# a monitor, an OSD, radosgw and the ceph CLI tools, from Debian's packages,
# plus openssl for the self-signed TLS certificate.
#
# Idempotent: does nothing (no apt-get update) when everything is already there.
# Fails loudly (non-zero exit, message on stderr) when anything is still
# missing afterwards.
set -euo pipefail

PACKAGES=(ceph-mon ceph-osd radosgw ceph-common openssl)
# Executables tests/servers/rgw.py runs; checked after the install.
COMMANDS=(ceph ceph-mon ceph-osd radosgw radosgw-admin ceph-authtool monmaptool openssl)

die() { echo "rgw-install.sh: ERROR: $*" >&2; exit 1; }

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
    echo "rgw-install.sh: already installed: ${PACKAGES[*]}"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 \
    || die "apt-get not found; install ${todo[*]:-${PACKAGES[*]}} by hand (Debian/Ubuntu packages)"

SUDO=()
if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: cannot install ${todo[*]}"
    SUDO=(sudo)
fi

echo "rgw-install.sh: installing: ${todo[*]:-${PACKAGES[*]}}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q || die "apt-get update failed"
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" \
    || die "apt-get install ${PACKAGES[*]} failed"

mapfile -t still < <(missing_packages)
((${#still[@]} == 0)) || die "packages still missing after install: ${still[*]}"
mapfile -t cmds < <(missing_commands)
((${#cmds[@]} == 0)) || die "commands still missing after install: ${cmds[*]}"

echo "rgw-install.sh: OK: $(ceph --version 2>/dev/null || echo 'ceph installed')"
