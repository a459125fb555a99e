# kernel-loop: `make demo` runs the bundled example, `make test` runs every check.
# Both create the local tool environments on first use (.venv for Python, node_modules for bats).

VENV      := .venv
PY        := $(VENV)/bin/python
BATS      := node_modules/bats/bin/bats
export BATS_LIB_PATH := $(CURDIR)/node_modules

.PHONY: demo test setup lint skill-check kbs-check bats pytest gpu-test clean

demo: $(VENV)/.ready
	$(PY) helpers/kloop.py demo

test: setup lint skill-check kbs-check bats pytest

setup: $(VENV)/.ready node_modules/.ready

$(VENV)/.ready: requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

node_modules/.ready: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

lint: setup
	$(VENV)/bin/shellcheck -x scripts/*.sh .ci/run tests/validate_skill.sh tests/gate/*.bash
	$(VENV)/bin/shellcheck -x --shell=bash tests/gate/*.bats
	$(VENV)/bin/ruff check helpers tests

skill-check: setup
	bash tests/validate_skill.sh

kbs-check: setup
	$(PY) helpers/kloop.py kbs check

bats: setup
	$(BATS) tests/gate

# pytest exits 5 when it collects nothing; that is not a failure of the suite.
pytest: setup
	$(PY) -m pytest tests/python -q; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]

gpu-test:
	python3 -m pytest tests/python -m gpu -v

clean:
	rm -rf $(VENV) node_modules .pytest_cache .ruff_cache
