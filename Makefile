# Build and test plumbing for kinetis-queue. Run from the repository root.
#
#   make test      services, lint, typecheck, Django checks, the full suite on every backend row (Django from the
#                  dev install) with line and branch coverage of kinetis_queue/ (worker subprocesses included), then
#                  the core + SQL suite (pytest -m core) on Django 5.2 LTS
#   make dist      the sdist and the wheel in dist/ (python -m build), checked by twine check --strict; in its own
#                  venv (.venv-dist: build and twine only; no system packages, no root)
#   make docs      the documentation site in build/site (MkDocs Material, strict: warnings and broken
#                  internal links fail); make docs-serve serves it on http://127.0.0.1:8000 while you edit
#   make demo      the testproject demo on SQLite, in its own venv (.venv-demo: the app and Django only;
#                  no services, no system packages, no root)
#   make bench     benchmarks (python -m bench, bench.redis, bench.rabbitmq, bench.outbox); needs the services
#   make bench-scale  jobs/s against 1-16 worker processes per store (python -m bench.scale; BENCH_ARGS such as
#                  --n 20000 --processes 1,2,4 for a short run); docs/capacity.md reads it
#   make bench-peers  kinetis-queue beside Dramatiq, Celery, RQ, Huey, procrastinate and django-tasks-db
#                  (python -m bench.peers) in their own venv (.venv-bench: the project + the bench extra)
#   make storms    the fault scenarios of many processes killed for a minute or more (-m storm), with figures
#   make soak      storms, then the long fault tier (tests/faults -m soak; KQ_SOAK_SECONDS per scenario and backend)
#
# Variables: VENV, VENV52, VENV60, PYTHON (an interpreter >= 3.12 to build the venvs with),
#            PYTEST_WORKERS (pytest-xdist processes; most tests wait on servers and timeouts,
#            so more processes than cores pays), PYTEST_ARGS, BENCH_ARGS.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

VENV ?= .venv
VENV52 ?= .venv-dj52
VENV60 ?= .venv-dj60
DEMO_VENV ?= .venv-demo
BENCH_VENV ?= .venv-bench
PY := $(VENV)/bin/python
PY52 := $(VENV52)/bin/python
PY60 := $(VENV60)/bin/python
# uv installs the packages of the test venvs (pip installs uv into $(VENV) first): it resolves and installs them in
# seconds where pip took minutes of make test's budget. The demo and peers' venvs keep plain pip.
UV := $(VENV)/bin/uv
# 8 on 2 cores: most tests wait on leases, delays and servers. With 4 the machine stood idle 18% to 25% of the
# main stage; with 6, 25% (12:38); with 8, 12% (10:58, no reruns, no failures).
PYTEST_WORKERS ?= 8
# pytest-xdist hands the tests out one at a time in the collection's order (tests/conftest.py spreads the long
# ones out), a module whose tests share a module-scoped fixture (a wheel build, a browser) as one unit.
XDIST = -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder
PYTEST_ARGS ?=
BENCH_ARGS ?=
# No reruns: a test that fails under load is a defect of the test or of the code, fixed (it awaits a condition, owns
# its server, has a bound that holds on a loaded machine) or moved to make storms with a reason, never retried.
# For an investigation, RERUNS='--reruns 1' runs a failed test once more and prints its first failure whole in
# "what the reruns hid" (tests/support/reruns.py).
RERUNS ?=

# Interpreters tried in order for a new venv; the first that runs and is >= 3.12 wins: $(PYTHON), python3.13 and
# python3.12 on PATH, then pyenv's installed 3.12+ (if pyenv is installed; under `pyenv root`), then the one
# `uv python find` names (if uv is installed), then python3. Candidates that do not run (such as pyenv shims
# of versions not selected) are skipped.
PYTHON_CANDIDATES := $(PYTHON) python3.13 python3.12
PYTHON_TRIED := $(PYTHON_CANDIDATES), pyenv's versions/3.1[2-9]*, uv python find, python3

export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Material for MkDocs prints a banner about MkDocs 2 on every build; the docs extra pins mkdocs < 2.
export NO_MKDOCS_2_WARNING := 1
# Bytecode goes to one cache beside the sources, not among them (.cache/pycache, ignored by git): each of the
# hundreds of processes the tests start reads its modules compiled, and the checkout holds no __pycache__.
# Compiling every module from source in every process (PYTHONDONTWRITEBYTECODE) cost about a second of CPU per
# interpreter start.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/.cache/pycache

# Shell snippets (used inside recipes).
IS_PY312 := -c 'import sys; sys.exit(sys.version_info < (3, 12))'
FIND_PYTHON := pyenv_root="$$(pyenv root 2>/dev/null || true)"; \
	uv_python="$$(uv python find '>=3.12' 2>/dev/null || true)"; \
	for c in $(PYTHON_CANDIDATES) $${pyenv_root:+"$$pyenv_root"/versions/3.1[2-9]*/bin/python} \
	    $${uv_python:+"$$uv_python"} python3; do \
	  if "$$c" $(IS_PY312) >/dev/null 2>&1; then command -v "$$c"; exit 0; fi; \
	done; exit 1

# Creates the venv $(1) with $(VENV)'s base interpreter, or reuses it when it already runs that interpreter's
# version (the Django 5.2 and 6.0 venvs).
SIBLING_VENV = base="$$("$(PY)" -c 'import sys; print(sys._base_executable)')"; \
	want="$$("$$base" -c 'import sys; print(sys.version)')"; \
	if [ -x "$(1)/bin/python" ] && [ "$$("$(1)/bin/python" -c 'import sys; print(sys.version)' 2>/dev/null)" = "$$want" ]; then \
	  echo "reusing $(1) ($$("$(1)/bin/python" -V))"; \
	else \
	  echo "creating $(1) with $$base ($$("$$base" -V))"; \
	  "$$base" -m venv --clear "$(1)"; \
	fi

# Prints the total line and branch coverage of the last `pytest --cov` run (coverage json on stdin).
export COVERAGE_TOTALS := import json, sys; t = json.load(sys.stdin)["totals"]; \
	print(f"== coverage of kinetis_queue/: lines {t['percent_statements_covered']:.1f}%", \
	f"({t['covered_lines']}/{t['num_statements']}), branches {t['percent_branches_covered']:.1f}%", \
	f"({t['covered_branches']}/{t['num_branches']})")

.PHONY: venv venv52 venv60 demo-venv bench-venv demo lint typecheck checks services test bench bench-scale bench-peers storms \
	soak clean dist docs docs-serve

# ---- virtual environments ------------------------------------------------------------------------

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/system-deps.sh
	bash scripts/system-deps.sh
	@if [ -x "$(PY)" ] && "$(PY)" $(IS_PY312) >/dev/null 2>&1; then \
	  echo "venv: reusing $(VENV) ($$("$(PY)" -V))"; \
	else \
	  py="$$($(FIND_PYTHON))" || { \
	    echo "error: no Python >= 3.12 found (tried: $(PYTHON_TRIED)); set PYTHON=/path/to/python3.12" >&2; \
	    exit 1; }; \
	  echo "venv: creating $(VENV) with $$py ($$("$$py" -V))"; \
	  "$$py" -m venv --clear "$(VENV)"; \
	fi
	@# -qq: pip's warnings about the machine's own pip configuration (find-links folders that are not there) are no
	@# finding of the project's; an error still prints.
	"$(PY)" -m pip install --quiet --quiet --progress-bar off 'uv>=0.9'
	"$(UV)" pip install --python "$(PY)" -e '.[dev]'
	touch "$@"

# The demo's venv: the app (editable) and Django, nothing else; no system packages, no root.
demo-venv: $(DEMO_VENV)/.installed

$(DEMO_VENV)/.installed: pyproject.toml
	@py="$$($(FIND_PYTHON))" || { \
	  echo "error: no Python >= 3.12 found (tried: $(PYTHON_TRIED)); set PYTHON=/path/to/python3.12" >&2; \
	  exit 1; }; \
	if [ -x "$(DEMO_VENV)/bin/python" ] && "$(DEMO_VENV)/bin/python" $(IS_PY312) >/dev/null 2>&1; then \
	  echo "demo: reusing $(DEMO_VENV)"; \
	else \
	  echo "demo: creating $(DEMO_VENV) with $$py ($$("$$py" -V)), installing the app and Django"; \
	  "$$py" -m venv --clear "$(DEMO_VENV)"; \
	fi
	"$(DEMO_VENV)/bin/python" -m pip install --quiet --progress-bar off -e .
	touch "$@"

# Django 5.2 LTS venv, built with the same base interpreter as $(VENV).
venv52: $(VENV52)/.installed

$(VENV52)/.installed: pyproject.toml scripts/system-deps.sh | $(VENV)/.installed
	@$(call SIBLING_VENV,$(VENV52))
	"$(UV)" pip install --python "$(PY52)" -e '.[dev]' 'django>=5.2,<5.3' 'django-stubs>=5.2,<5.3' \
	  'django-tasks>=0.12'
	touch "$@"

# Django 6.0 with the stores' drivers and no test tools: the docs' settings snippets also run on it
# (tests/docs/test_settings_snippets.py, KQ_SNIPPET_PYTHONS; the app comes from the checkout).
venv60: $(VENV60)/.installed

$(VENV60)/.installed: pyproject.toml scripts/system-deps.sh | $(VENV)/.installed
	@$(call SIBLING_VENV,$(VENV60))
	"$(UV)" pip install --python "$(PY60)" -e '.[postgres,mysql,redis,sqs,rabbitmq,schedules,metrics,otel]' \
	  'django>=6.0,<6.1'
	touch "$@"

# The peers' venv for make bench-peers: the project (editable) and its bench extra, apart from $(VENV) because the
# peers bring libraries (and may pin versions) the project's own environment should not carry.
bench-venv: $(BENCH_VENV)/.installed

$(BENCH_VENV)/.installed: pyproject.toml
	@py="$$($(FIND_PYTHON))" || { \
	  echo "error: no Python >= 3.12 found (tried: $(PYTHON_TRIED)); set PYTHON=/path/to/python3.12" >&2; \
	  exit 1; }; \
	if [ -x "$(BENCH_VENV)/bin/python" ] && "$(BENCH_VENV)/bin/python" $(IS_PY312) >/dev/null 2>&1; then \
	  echo "bench-venv: reusing $(BENCH_VENV)"; \
	else \
	  echo "bench-venv: creating $(BENCH_VENV) with $$py ($$("$$py" -V))"; \
	  "$$py" -m venv --clear "$(BENCH_VENV)"; \
	fi
	"$(BENCH_VENV)/bin/python" -m pip install --quiet --upgrade pip
	"$(BENCH_VENV)/bin/python" -m pip install --progress-bar off -e '.[bench]'
	touch "$@"

# ---- services ------------------------------------------------------------------------------------

services:
	bash scripts/services.sh

# ---- static checks -------------------------------------------------------------------------------

lint: venv
	"$(VENV)/bin/ruff" check --extend-exclude "$(VENV),$(VENV52),$(VENV60),$(DEMO_VENV)" .
	"$(VENV)/bin/ruff" format --check --extend-exclude "$(VENV),$(VENV52),$(VENV60),$(DEMO_VENV)" .

typecheck: venv
	PYTHONPATH=testproject:. "$(VENV)/bin/mypy" kinetis_queue

# The testproject's checks on a migrated database of its own (a temporary file), where any warning fails.
checks: venv
	PYTHONPATH=. "$(PY)" testproject/manage.py makemigrations --check --dry-run
	db="$$(mktemp -d)"; trap 'rm -rf "$$db"' EXIT; \
	KINETIS_DEMO_DB="$$db/checks.sqlite3" "$(PY)" testproject/manage.py migrate -v 0; \
	KINETIS_DEMO_DB="$$db/checks.sqlite3" "$(PY)" testproject/manage.py check --fail-level WARNING

# ---- tests ---------------------------------------------------------------------------------------

test: venv venv52 venv60 services lint typecheck checks docs
	KQ_SNIPPET_PYTHONS="$(PY60)" "$(PY)" -m pytest $(XDIST) $(RERUNS) --cov --cov-report=term-missing:skip-covered $(PYTEST_ARGS)
	@"$(PY)" -m coverage json -q -o - | "$(PY)" -c "$$COVERAGE_TOTALS"
	PY="$(PY)" bash scripts/django-task-tests.sh
	@echo "== core + SQL suite on Django $$("$(PY52)" -c 'import django; print(django.get_version())')"
	"$(PY52)" -m pytest $(XDIST) $(RERUNS) -m core $(PYTEST_ARGS)

# The fault scenarios of many processes killed for a minute or more (-m storm: the kill storms of the outbox,
# unique jobs, workflows and limits, the multi-scheduler runs), printing their figures; part of make soak too.
storms: venv services
	KQ_STORMS=1 "$(PY)" -m pytest $(XDIST) -m storm -rA $(PYTEST_ARGS) | tee reports/storms.log

# The long fault tier (tests/faults, -m soak): KQ_SOAK_SECONDS per scenario and backend (default 1800).
# One JSON report per scenario and backend in reports/reliability/soak/, then their table in SUMMARY.md.
soak: venv services storms
	@mkdir -p reports/reliability/soak
	status=0; KQ_SOAK=1 KQ_REPORTS_DIR=reports/reliability/soak "$(PY)" -m pytest tests/faults -m soak \
	  $(PYTEST_ARGS) || status=$$?; \
	"$(PY)" -m tests.faults.checker reports/reliability/soak | tee reports/reliability/soak/SUMMARY.md; \
	exit $$status

# ---- package and documentation --------------------------------------------------------------------

# The wheel is built from the sdist (python -m build's default), so a file missing from the sdist fails here.
# tests/packaging/test_wheel.py builds its own and installs it into a fresh venv (part of make test).
# Building needs build and twine only (build fetches the build backend into an isolated env of its own): a small
# venv of those two, not the dev venv's system packages and dev extra.
DIST_VENV ?= .venv-dist

$(DIST_VENV)/.installed:
	@py="$$($(FIND_PYTHON))" || { \
	  echo "error: no Python >= 3.12 found (tried: $(PYTHON_TRIED)); set PYTHON=/path/to/python3.12" >&2; \
	  exit 1; }; \
	if [ -x "$(DIST_VENV)/bin/python" ] && "$(DIST_VENV)/bin/python" $(IS_PY312) >/dev/null 2>&1; then \
	  echo "dist: reusing $(DIST_VENV)"; \
	else \
	  echo "dist: creating $(DIST_VENV) with $$py ($$("$$py" -V)), installing build and twine"; \
	  "$$py" -m venv --clear "$(DIST_VENV)"; \
	fi
	"$(DIST_VENV)/bin/python" -m pip install --quiet --progress-bar off build twine
	touch "$@"

dist: $(DIST_VENV)/.installed
	rm -rf dist
	"$(DIST_VENV)/bin/python" -m build --outdir dist .
	"$(DIST_VENV)/bin/python" -m twine check --strict dist/*

# The reference pages are generated while building (scripts/docs_hooks.py, mkdocstrings); the examples
# marked in the pages run in tests/docs (part of make test's pytest run).
docs: venv
	"$(PY)" -m mkdocs build --strict --clean

docs-serve: venv
	"$(PY)" -m mkdocs serve --dev-addr 127.0.0.1:8000

# ---- demo and benchmarks -------------------------------------------------------------------------

demo: demo-venv
	"$(DEMO_VENV)/bin/python" testproject/manage.py demo

bench: venv services
	"$(PY)" -m bench $(BENCH_ARGS)
	"$(PY)" -m bench.redis $(BENCH_ARGS)
	"$(PY)" -m bench.rabbitmq $(BENCH_ARGS)
	"$(PY)" -m bench.outbox
	"$(PY)" -m bench.observability
	"$(PY)" -m bench.flow

# Worker processes against jobs/s on Redis, PostgreSQL, RabbitMQ and SQS (moto), 100,000 jobs per run by default.
bench-scale: venv services
	"$(PY)" -m bench.scale $(BENCH_ARGS)

# kinetis-queue beside its peers, one worker process each (bench/peers); BENCH_ARGS such as --quick or --peers.
bench-peers: bench-venv services
	"$(BENCH_VENV)/bin/python" -m bench.peers $(BENCH_ARGS)

clean:
	rm -rf "$(VENV)" "$(VENV52)" "$(VENV60)" "$(DEMO_VENV)" "$(BENCH_VENV)" "$(DIST_VENV)" testproject/demo.sqlite3 build dist kinetis_queue.egg-info
