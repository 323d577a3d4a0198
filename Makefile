# Boxcar: two commands do all the set-up on a fresh machine.
#   make run            archive the bundled demo site (offline), or: make run URLS="https://… https://…"
#   make test           make check, then the whole test suite (real NATS JetStream, Postgres, SQLite,
#                       hooks, local sites), then make compose-test
# Guards:
#   make check          ruff, ruff format --check, mypy (strict on libs/shared), the fast tests
#   make test-archivebox-import   import real ArchiveBox 0.7.x and 0.9 collections built here
#   make test-nats-cluster   a three-server NATS cluster, its leader SIGKILLed mid-crawl
#   make extension      the browser extension: dist/extension/boxcar-{chromium,firefox}.zip (extension-lint: web-ext lint)
# The homelab stack (Docker Compose or podman-compose, whichever is here; README: "Docker Compose"):
#   make compose-up     build the images, start the stack, wait for every healthcheck
#   make compose-down   stop it (the archive stays in its volumes)
#   make compose-test   build, start, archive, scale, kill, restart, down/up, down -v: one summary line
#   make compose-test-cluster   the same on the `cluster` profile (three NATS servers), one of them
#                       SIGKILLed mid-crawl too; not part of make test (about 12 more minutes)
#   make compose-test-store     the cluster's test with the archive in an S3 bucket (moto's server)
#                       and the executors on no volume of ingest's; not part of make test either
SHELL := /bin/sh
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test check fast-tests test-archivebox-import test-nats-cluster typecheck install system-deps up lint bench clean compose-up compose-down compose-test compose-test-cluster compose-test-store extension extension-lint

run: install
	$(VENV)/bin/boxcar install
	@if [ -n "$(URLS)" ]; then $(VENV)/bin/boxcar add --wait $(URLS); else $(VENV)/bin/boxcar demo; fi

# Tests run TEST_WORKERS at a time (pytest-xdist; 0: one by one, in this process). Most of the
# stack tests wait on real outages, crawls and Chromium rather than on the CPU, so two at a time
# take half the time on two cores; a test file stays on one worker (its module fixtures built once).
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadfile

test: install check
	$(VENV)/bin/pytest $(XDIST) -m "not check and not separate"
	$(MAKE) compose-test

# The guards, first in CI (and in .pre-commit-config.yaml): lint, format, types, and the fast
# tests — those of libs/ and services/ that start no NATS server (marked `check` in conftest.py;
# `make test` runs the others after it, so each test runs once).
check: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/typecheck.py
	$(MAKE) --no-print-directory fast-tests

# make check's tests (also .pre-commit-config.yaml's, before a push)
fast-tests: install
	$(VENV)/bin/pytest -q $(XDIST) -m check libs services

# boxcar import-archivebox against real collections ArchiveBox 0.7.x and 0.9 make here (their
# tools are installed once under .cache/; 0.9 needs a Python >= 3.13)
# (each separate suite is chosen by its marker, from SEPARATE in conftest.py)
test-archivebox-import: install
	$(VENV)/bin/pytest -q -m archivebox_import tests

# the three-server NATS cluster with its leader killed mid-crawl (tests/faults/test_nats_cluster.py;
# like test-archivebox-import, left out of `make test` for time: the note of each change reports it)
test-nats-cluster: install
	$(VENV)/bin/pytest -q -m nats_cluster tests

typecheck: install
	$(PY) scripts/typecheck.py

# The browser extension (extension/, README "Save from anywhere"): dist/extension/boxcar-{chromium,firefox}.zip,
# and Mozilla's linter on the Firefox build (web-ext from npm, kept under .cache/)
WEB_EXT_VERSION := 8.10.0
WEB_EXT := .cache/web-ext/node_modules/.bin/web-ext
extension:
	$(PYTHON3) scripts/build_extension.py
extension-lint: extension
	@[ -x $(WEB_EXT) ] || npm install --silent --no-audit --no-fund --prefix .cache/web-ext web-ext@$(WEB_EXT_VERSION)
	$(WEB_EXT) lint --source-dir dist/extension/firefox

up: install
	$(VENV)/bin/boxcar up

install: $(STAMP) system-deps

$(STAMP): pyproject.toml constraints.txt scripts/find-python
	@python=$$(./scripts/find-python) || exit 1; \
	 echo "using $$python ($$($$python -V))"; \
	 if ! { [ -x $(PY) ] && $(PY) -m pip --version >/dev/null 2>&1; }; then \
	   [ ! -e $(VENV) ] || echo "$(VENV) has no pip (an interrupted set-up?): creating it again"; \
	   rm -rf $(VENV); \
	   $$python -m venv $(VENV) || { echo "error: could not create $(VENV) (on Debian: apt-get install python3-venv)"; exit 1; }; \
	 fi
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# Host programs the default plugins use (binary:Debian package); installed with apt-get when
# missing and we are root. npm lets the binary-resolver fetch Node 24 for the browser hooks;
# ffmpeg is yt-dlp's (merging, metadata, subtitles), git the git plugin's. apt-get waits up to
# 10 minutes for another apt-get (an unattended upgrade, a second set-up) to let go of its lock.
SYSTEM_PACKAGES := wget:wget chromium:chromium pdftoppm:poppler-utils npm:npm ffmpeg:ffmpeg git:git
system-deps:
	@missing=""; for pair in $(SYSTEM_PACKAGES); do command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; done; \
	 if [ -n "$$missing" ]; then \
	   if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	     echo "installing$$missing with apt-get"; apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $$missing; \
	   else echo "error: missing$$missing; install with your package manager (e.g. sudo apt-get install$$missing)"; exit 1; fi; \
	 fi

# The compose scripts use only the standard library: the host's python3 (>= 3.9) runs them, no venv.
PYTHON3 ?= python3
compose-up:
	$(PYTHON3) scripts/compose.py up

compose-down:
	$(PYTHON3) scripts/compose.py down

compose-test:
	$(PYTHON3) scripts/compose_test.py

compose-test-cluster:
	BOXCAR_COMPOSE_CLUSTER=1 $(PYTHON3) scripts/compose_test.py

compose-test-store:
	BOXCAR_COMPOSE_STORE=1 $(PYTHON3) scripts/compose_test.py

lint: install
	$(VENV)/bin/ruff check .

bench: install
	$(PY) bench/bench_pipeline.py
	$(PY) bench/bench_stack.py
	$(PY) bench/bench_claims.py
	$(PY) bench/bench_decisions.py
	$(PY) bench/bench_projector.py
	$(PY) bench/bench_ui_list.py
	$(PY) bench/bench_egress.py

clean:
	rm -rf $(VENV) .pytest_cache
