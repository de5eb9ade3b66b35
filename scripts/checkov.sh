#!/usr/bin/env bash
# Run checkov on terraform/ and exit non-zero on any failed check.
#
# checkov pins an old boto3, so it lives in its own virtualenv, .venv-checkov
# at the repository root (gitignored), created and filled from PyPI on first
# use and refilled when CHECKOV_VERSION changes. Deliberate skips are inline
# `#checkov:skip=CKV_...:reason` comments next to the resource they concern.
set -euo pipefail

CHECKOV_VERSION="${CHECKOV_VERSION:-3.3.30}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-checkov"
PYTHON="${PYTHON:-python3}"

# make test builds the venv in the background (--install-only) while the suite runs; the
# lock makes a checkov run that comes first wait for that build instead of racing it.
exec 9>"$ROOT/.venv-checkov.lock"
flock 9
if [[ "$(cat "$VENV/.checkov-version" 2>/dev/null)" != "$CHECKOV_VERSION" ]]; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "checkov==$CHECKOV_VERSION"
    echo "$CHECKOV_VERSION" > "$VENV/.checkov-version"
fi
flock -u 9
if [[ "${1:-}" == "--install-only" ]]; then
    exit 0
fi

# --skip-download: no guideline or policy download from the checkov platform
# (only package registries are reachable); local modules are read in place.
exec "$VENV/bin/checkov" \
    --directory "$ROOT/terraform" \
    --framework terraform \
    --skip-download \
    --download-external-modules false \
    --compact \
    --quiet \
    "$@"
