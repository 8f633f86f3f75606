# llmb: one entry point for everything a developer or CI runs.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)

.PHONY: help venv bytecode provision lock lint test test-py test-unit test-e2e test-bats bench bench-many \
	bench-screen test-nemo slurm-up slurm-down demo clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

REQ := common/requirements
venv: $(VENV)/.installed ## create/update the development venv (the versions of the lock files)
$(VENV)/.installed: $(REQ)/dev.txt $(REQ)/launch.txt $(REQ)/report.txt $(REQ)/smoke.txt $(REQ)/dev.lock $(REQ)/smoke.lock
	@# one installer at a time (make demo beside make test): the second waits, then finds it done
	exec 9>>$(VENV).lock; flock -w 900 9 || { echo "make venv: waited 900 s for $(VENV).lock" \
		"(another make is installing the venv); let it finish, then run make again" >&2; exit 1; }; \
	test -x $(PY) || python3 -m venv $(VENV); \
	$(PY) -m pip install -q --disable-pip-version-check -c $(REQ)/dev.lock -c $(REQ)/smoke.lock \
		-r $(REQ)/dev.txt -r $(REQ)/smoke.txt; \
	touch $@

# The package's bytecode, written once before the tiers: each test that starts llmb in a fresh
# Python (launch.sh, llmb-run, the installer: thousands of them) would otherwise compile every
# module it imports again wherever PYTHONDONTWRITEBYTECODE is set (as on this project's build
# machines), ~0.2 s each.
bytecode: venv ## compile common/ and tests/ once (a fresh Python then reads, never recompiles)
	$(PY) -m compileall -q common tests >/dev/null

provision: ## the Debian packages the tests use (test cluster's, chromium), once, before any worker (root)
	bash tests/tools/provision.sh

lock: ## pin anew every package the test venvs install (common/requirements/*.lock; minutes)
	python3 tests/tools/lock.py

lint: venv ## shellcheck, ruff (style, complexity, heavy imports), mypy, import contracts
	bash tests/tools/shell-scripts.sh | xargs -d '\n' shellcheck -x
	ruff check .
	mypy
	PYTHONPATH=common lint-imports

# pytest-xdist workers for the unit tier: one per core and one more (a test that waits on a
# subprocess or a timer leaves its core idle; on 2 cores, 3 workers took 5.2 min where 2 took 6.6)
UNIT_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test-unit: venv bytecode provision ## the unit tier on pytest-xdist workers, one per core and one more
	$(PY) -m pytest -q -m "not e2e" -n $(UNIT_WORKERS) --dist worksteal

# e2e workers: three, each with test clusters of its own, handing tests to whichever is idle
# (worksteal): a test that waits on Slurm (a paused controller, a queued job) leaves a core to
# another's job. On 2 cores: 2 workers 247 s, 3 workers 226 s, 3 with worksteal 198 s.
E2E_WORKERS ?= 3
test-e2e: venv bytecode provision ## the end-to-end tier on real test Slurm clusters (root; else skipped, saying so)
	$(PY) -m pytest -q -m "e2e and not alone" -n $(E2E_WORKERS) --dist worksteal
	$(PY) -m pytest -q -m "e2e and alone"

test-py: test-unit test-e2e ## both pytest tiers

test-bats: venv bytecode ## bats suites (the test cluster's own beside the others)
	bash tests/tools/bats.sh

test: venv bytecode provision ## everything CI runs: lint, unit, e2e, bats; each tier's wall time at the end
	bash tests/tools/tiers.sh lint test-unit test-e2e test-bats

bench: venv ## speed and memory targets (analyzer, launch start-up)
	bash tests/bench/run.sh

bench-many: venv ## the analyzer's memory over 200,000 small logs (writes them once: minutes)
	.venv/bin/python tests/bench/many_logs.py

adversarial: venv ## hostile inputs against every front (launch.sh, llmb-run, analyzer, installer, setup): counts per surface
	$(PY) tests/tools/adversarial.py

bench-screen: venv ## the screen's detection rate and false suspects on synthetic screens (2-1024 nodes)
	$(PY) tests/bench/bench_screen.py

test-nemo: ## every NeMo recipe with the image's nemo-toolkit 2.3.1 (.venv-nemo, 3 GB; CI runs it)
	bash tests/nemo/run.sh

slurm-up: ## start the throw-away test Slurm cluster (root; LLMB_SLURM_NODES=N nodes, default 2)
	bash tests/slurm/cluster.sh up

slurm-down: ## stop it
	bash tests/slurm/cluster.sh down

demo: venv ## run a smoke benchmark locally and analyze it
	bash common/demo.sh

clean: ## remove venvs and caches
	rm -rf $(VENV) .venv-nemo .pytest_cache .ruff_cache .mypy_cache .import_linter_cache
