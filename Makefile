# The two commands: `make run` (the whole platform locally, no external service) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTHON ?= python3

.PHONY: run test check install lint format typecheck imports bench migrate clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Local platform: web, Celery worker and beat on SQLite and kombu's filesystem broker under var/, DEBUG on,
# demo data loaded, a round every 30 s. It also writes .env (if there is none: a user's own is kept) with the
# same local settings, so that `manage.py ...` in this checkout works afterwards without typing them; the
# environment always wins over .env (config/env.py).
run: export DEBUG = 1
run: export TLS = 0
run: export DATABASE_URL =
run: export REDIS_URL =
run: export ROUND_SECONDS ?= 30
run: export EMAIL_BACKEND ?= django.core.mail.backends.console.EmailBackend
run: export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
run: install .env
	$(PY) manage.py migrate --noinput
	$(PY) manage.py demo_data
	$(VENV)/bin/honcho -f Procfile start

.env:
	printf '%s\n' '# Written by `make run`: the local settings for manage.py in this checkout. Variables set in the' \
		'# environment win over these (config/env.py); edit freely, `make run` never overwrites this file.' \
		'DEBUG=1' 'TLS=0' 'DATABASE_URL=' 'REDIS_URL=' \
		'EMAIL_BACKEND=django.core.mail.backends.console.EmailBackend' > $@

# pytest-xdist workers (each with its own test database); PYTEST_PARALLEL= runs in one process.
PYTEST_PARALLEL ?= -n 2

# Whole suite against the real PostgreSQL and Redis (started here if installed but stopped). The PostgreSQL
# restart test runs inside it on a private cluster it makes (tests/faults/test_private_postgres.py), so the
# machine's server is never restarted.
test check: export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gpumarket
test check: export REDIS_URL ?= redis://127.0.0.1:6379/0
test: lint typecheck imports
	scripts/ensure-services
	$(VENV)/bin/pytest $(PYTEST_PARALLEL)

# The inner loop, a few minutes: lint, types and every test that needs neither a browser nor real worker and
# agent processes nor minutes of generated input (no `browser`, `integration` or `slow` marker), two at a
# time. `make test` before a merge.
check: lint typecheck imports
	scripts/ensure-services
	$(VENV)/bin/pytest -q -m "not browser and not integration and not slow" $(PYTEST_PARALLEL)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

typecheck: install
	$(VENV)/bin/mypy

# The layers (pyproject's [tool.importlinter], docs/architecture.md).
imports: install
	$(VENV)/bin/lint-imports

bench: install
	$(PY) bench/clearing.py
	$(PY) bench/simulate.py
	$(PY) bench/round.py
	$(PY) bench/api.py
	$(PY) bench/usage.py
	$(PY) bench/retention.py
	$(PY) bench/agent.py
	$(PY) bench/sandbox.py
	$(PY) bench/speed_estimates.py
	$(PY) bench/cli.py

clean:
	rm -rf $(VENV) var
