# Boxcar: two commands do all the set-up on a fresh machine.
#   make run            archive the bundled demo site (offline), or: make run URLS="https://… https://…"
#   make test           the whole test suite (real NATS JetStream, Postgres, SQLite, hooks, local sites)
SHELL := /bin/sh
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install system-deps up lint bench clean

run: install
	@if [ -n "$(URLS)" ]; then $(VENV)/bin/boxcar add --wait $(URLS); else $(VENV)/bin/boxcar demo; fi

test: install
	$(VENV)/bin/pytest

up: install
	$(VENV)/bin/boxcar up

install: $(STAMP) system-deps

$(STAMP): pyproject.toml constraints.txt scripts/find-python
	@python=$$(./scripts/find-python) || exit 1; \
	 echo "using $$python ($$($$python -V))"; \
	 [ -x $(PY) ] || $$python -m venv $(VENV) || { echo "error: could not create $(VENV) (on Debian: apt-get install python3-venv)"; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# Host binaries the default plugins use; installed with apt-get when missing and we are root.
SYSTEM_BINARIES := wget
system-deps:
	@missing=""; for b in $(SYSTEM_BINARIES); do command -v $$b >/dev/null 2>&1 || missing="$$missing $$b"; done; \
	 if [ -n "$$missing" ]; then \
	   if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	     echo "installing$$missing with apt-get"; apt-get update -qq && apt-get install -y -qq $$missing; \
	   else echo "error: missing$$missing; install it with your package manager (e.g. sudo apt-get install$$missing)"; exit 1; fi; \
	 fi

lint: install
	$(VENV)/bin/ruff check .

bench: install
	$(PY) bench/bench_pipeline.py

clean:
	rm -rf $(VENV) .pytest_cache
