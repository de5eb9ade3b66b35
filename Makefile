# s3kv developer tasks. `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint unit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

## The main job on an embedded default endpoint (no AWS account needed).
demo: $(STAMP)
	$(VENV)/bin/s3kv key s3://demo-bucket/kv --model meta-llama/Llama-3.1-8B-Instruct \
		--tokens-per-hash 16 --dtype bfloat16 --block-hash 00a1b2c3d4e5f60718293a4b5c6d7e8f

lint: $(STAMP)
	$(VENV)/bin/ruff check s3kv tests bench
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

## The whole suite: lint, then every test tier.
test: $(STAMP) lint
	$(PY) -m pytest tests

bench: $(STAMP)
	$(PY) bench/bench_keys.py

clean:
	rm -rf $(VENV) .venv-vllm .venv-checkov .pytest_cache .mypy_cache .ruff_cache
