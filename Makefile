# llmb: one entry point for everything a developer or CI runs.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)

.PHONY: help venv lint test test-py test-bats bench bench-many bench-screen test-nemo slurm-up slurm-down demo clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

venv: $(VENV)/.installed ## create/update the development venv
$(VENV)/.installed: common/requirements/dev.txt common/requirements/launch.txt common/requirements/report.txt common/requirements/smoke.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r common/requirements/dev.txt -r common/requirements/smoke.txt
	touch $@


lint: venv ## shellcheck, ruff (style, complexity, heavy imports), mypy, import contracts
	bash tests/tools/shell-scripts.sh | xargs -d '\n' shellcheck -x
	ruff check .
	mypy
	PYTHONPATH=common lint-imports

test-py: venv ## pytest (the real-Slurm end-to-end tests run when root)
	$(PY) -m pytest -q

test-bats: venv ## bats suites
	bats --print-output-on-failure -r tests/bats

test: lint test-py test-bats ## everything CI runs

bench: venv ## speed and memory targets (analyzer, launch start-up)
	bash tests/bench/run.sh

bench-many: venv ## the analyzer's memory over 200,000 small logs (writes them once: minutes)
	.venv/bin/python tests/bench/many_logs.py

bench-screen: venv ## the screen's detection rate and false suspects on synthetic screens (2-1024 nodes)
	$(PY) tests/bench/bench_screen.py

test-nemo: ## every NeMo recipe with the image's nemo-toolkit 2.3.1 (.venv-nemo, 3 GB; CI runs it)
	bash tests/nemo/run.sh

slurm-up: ## start the throw-away test Slurm cluster (root; LLMB_SLURM_NODES=N nodes, default 2)
	bash tests/slurm/cluster.sh up

slurm-down: ## stop it
	bash tests/slurm/cluster.sh down

demo: ## run a smoke benchmark locally and analyze it
	bash common/demo.sh

clean: ## remove venvs and caches
	rm -rf $(VENV) .venv-nemo .pytest_cache .ruff_cache .mypy_cache .import_linter_cache
