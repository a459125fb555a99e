# kernel-loop: `make demo` runs the bundled example, `make test` runs every check.
# `make demo` creates .venv with the replay's few packages on first use; `make test` adds the test tools (CPU torch
# among them) and creates node_modules (bats, skillmds).

VENV      := .venv
PY        := $(VENV)/bin/python
BATS      := node_modules/bats/bin/bats
export BATS_LIB_PATH := $(CURDIR)/node_modules

.PHONY: demo test setup lint skill-check kbs-check bats pytest skill-pack gpu-test clean \
        install-skill examples-unpack examples-pack

demo: $(VENV)/.demo-ready
	$(PY) helpers/kloop.py demo

# The suite's Python processes (the CLI, judge and worker processes it starts, and the pytest workers) keep the
# bytecode of the helpers and the tests (__pycache__, ignored by git) even where the environment says not to
# write it (PYTHONDONTWRITEBYTECODE, empty is off): otherwise each of them compiles those modules again.
test setup lint skill-check kbs-check bats pytest skill-pack: export PYTHONDONTWRITEBYTECODE :=

# bats, pytest and skill-pack need nothing of one another: after the quick checks they run at once, sharing
# the cores (each leaves some idle: sleeps, waits on child processes), and each one's output is printed
# whole when it ends (--output-sync).  The target fails if any of them fails.
test: setup lint skill-check kbs-check
	@$(MAKE) --no-print-directory -j3 --output-sync=target bats pytest skill-pack

setup: $(VENV)/.ready node_modules/.ready

# The replay needs no torch: the demo's own requirements install in seconds (the test tools reuse the venv).
$(VENV)/.demo-ready: requirements-demo.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -r requirements-demo.txt
	touch $@

$(VENV)/.ready: requirements-dev.txt requirements-demo.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

node_modules/.ready: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

lint: setup
	$(VENV)/bin/shellcheck -x scripts/*.sh .ci/run tests/validate_skill.sh tests/skill_pack.sh tests/gate/*.bash
	$(VENV)/bin/shellcheck -x --shell=bash tests/gate/*.bats
	$(VENV)/bin/ruff check helpers tests examples

skill-check: setup
	bash tests/validate_skill.sh

kbs-check: setup
	$(PY) helpers/kloop.py kbs check

# The .bats files run in two bats processes at once (bats --jobs needs GNU parallel): the files named in
# BATS_FIRST in one, every other file in the other (a new file lands there).  Each process's output is
# kept in order and printed whole, the first group's, then the second's; the target fails if either fails.
BATS_FIRST := state provenance failsafe usage files templates

bats: setup
	@first=; second=; for f in tests/gate/*.bats; do n=$${f##*/}; n=$${n%.bats}; \
	  case " $(BATS_FIRST) " in *" $$n "*) first="$$first $$f";; *) second="$$second $$f";; esac; done; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(BATS) $$first >"$$tmp/1" 2>&1 & p1=$$!; \
	$(BATS) $$second >"$$tmp/2" 2>&1; r2=$$?; wait $$p1; r1=$$?; \
	echo "$(BATS)$$first"; cat "$$tmp/1"; echo "$(BATS)$$second"; cat "$$tmp/2"; \
	[ $$r1 -eq 0 ] && [ $$r2 -eq 0 ] || { echo "bats: failed (exit $$r1 and $$r2)" >&2; exit 1; }

# pytest exits 5 when it collects nothing; that is not a failure of the suite.  With pytest-xdist in .venv
# the tests run in as many processes as there are cores, idle processes taking work from busy ones
# (worksteal); without xdist, one after another.  On 2 cores `make test` took 203-212 s with 2 against
# 217-223 s with 3 (bats and the skill pack fill the waits on a judge's or worker's start or a timeout; a
# third process only added its own start and the contention: about 30 s more CPU).  The tests marked
# `waits` (a 20 s timeout, a reference's sleeps: 60 s of waiting for 11 s of CPU) run beside them in one
# process of their own: in the xdist run each left a core idle while it waited (make test 178 s, then 169 s).
pytest: setup
	@par=$$($(PY) -c 'import os, xdist; print(f"-n {len(os.sched_getaffinity(0))} --dist worksteal")' 2>/dev/null); \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PY) -m pytest tests/python -q -m waits --basetemp "$$tmp/base" >"$$tmp/waits" 2>&1 & p1=$$!; \
	echo "$(PY) -m pytest tests/python -q $$par -m 'not waits'"; \
	$(PY) -m pytest tests/python -q $$par -m 'not waits'; rc=$$?; wait $$p1; r1=$$?; \
	echo "$(PY) -m pytest tests/python -q -m waits (beside it)"; cat "$$tmp/waits"; \
	{ [ $$rc -eq 0 ] || [ $$rc -eq 5 ]; } && { [ $$r1 -eq 0 ] || [ $$r1 -eq 5 ]; } || \
	  { echo "pytest: failed (exit $$rc, and $$r1 for the tests marked waits)" >&2; exit 1; }

# The skill as users install it (tests/skill_pack.sh): pack limits, skillmd lint, skillmd add, then the
# helpers, the gate and the demo from the installed copy.
skill-pack: setup
	bash tests/skill_pack.sh

# The GPU suite runs with the system's python3 (the one with a CUDA torch); it is skipped, with the reason,
# where that python3 cannot import what the suite needs or sees no CUDA GPU.
gpu-test:
	@if ! python3 -c 'import torch, pytest, jinja2, yaml' 2>/dev/null; then \
	  echo "gpu-test: skipped: python3 ($$(command -v python3)) cannot import torch, pytest, jinja2 and pyyaml (pip install torch pytest jinja2 pyyaml)"; exit 0; fi; \
	if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then \
	  echo "gpu-test: skipped: torch.cuda.is_available() is False in python3 (no CUDA GPU visible)"; exit 0; fi; \
	python3 -m pytest tests/python -m gpu -v

clean:
	rm -rf $(VENV) node_modules .pytest_cache .ruff_cache build helpers/*.egg-info

# Install the skill from this checkout: copies the files git tracks (never .venv, node_modules, caches
# or build output) into DEST, whose last folder must be named kernel-loop.
#   make install-skill DEST="$HOME/.claude/skills/kernel-loop"
install-skill:
	@dest='$(patsubst %/,%,$(DEST))'; \
	if [ "$${dest##*/}" != kernel-loop ]; then \
	  echo "install-skill: DEST must be a folder named kernel-loop, e.g. DEST=\"\$$HOME/.claude/skills/kernel-loop\" (got '$(DEST)')" >&2; exit 2; fi; \
	if [ -e "$$dest" ] || [ -L "$$dest" ]; then \
	  echo "install-skill: $$dest already exists; remove it first or choose another DEST" >&2; exit 2; fi; \
	git ls-files --error-unmatch SKILL.md >/dev/null 2>&1 || { \
	  echo "install-skill: run it in a git checkout of kernel-loop (it copies the files git tracks)" >&2; exit 2; }; \
	mkdir -p "$$dest" && \
	git ls-files -z | xargs -0 sh -c 'for f do if [ -e "$$f" ] || [ -L "$$f" ]; then printf "%s\0" "$$f"; fi; done' sh \
	  | tar --null -T - -cf - | tar -xf - -C "$$dest" && [ -f "$$dest/SKILL.md" ] && \
	echo "installed $$(find "$$dest" -type f | wc -l | tr -d ' ') files into $$dest"

# The example runs are stored as examples/<name>/run.tar.gz, with browsable copies of the report beside
# each.  To change one: `make examples-unpack`, edit examples/<name>/run/ (git ignores it), then
# `make examples-pack`.  Packing is reproducible: the same files give the same bytes (sorted names,
# fixed mtime and owner, no name or time in the gzip header).  GNU tar is needed to pack.
EXAMPLES_ROOT ?= examples
EXAMPLE_MTIME := 2026-11-30 00:00:00 UTC

examples-unpack:
	@for a in $(EXAMPLES_ROOT)/*/run.tar.gz; do \
	  ex=$${a%/run.tar.gz}; \
	  if [ -e "$$ex/run" ]; then echo "examples-unpack: $$ex/run exists; left as it is" >&2; continue; fi; \
	  tar -xzf "$$a" -C "$$ex" || exit 1; echo "unpacked $$ex/run"; \
	done

examples-pack:
	@for run in $(EXAMPLES_ROOT)/*/run; do \
	  [ -d "$$run" ] || continue; ex=$${run%/run}; \
	  rm -f "$$ex/run.tar"; \
	  tar --create --file="$$ex/run.tar" --sort=name --format=gnu --numeric-owner --owner=0 --group=0 \
	      --mtime='$(EXAMPLE_MTIME)' --mode='u+rw,go-w,a+r' -C "$$ex" run && \
	  gzip -n -9 -f "$$ex/run.tar" && \
	  cp "$$run/final_report.md" "$$run/final_report.png" "$$ex/" || exit 1; \
	  echo "packed $$ex/run.tar.gz"; \
	done
