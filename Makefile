# Both entry points bootstrap their own virtual environment from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint typecheck unit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m monotape run $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check monotape tests bench
	$(VENV)/bin/ruff format --check monotape tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

test: lint typecheck unit

# The quick loop while editing (a few minutes): lint, types and every test that starts no
# server and is not marked slow. `make test` (~11 minutes on 2 cores) runs everything.
test-fast: lint typecheck
	$(VENV)/bin/pytest -q -m "not e2e and not slow" $(PYTEST_ARGS)

bench: $(STAMP)
	-npm ci --prefix bench/node --no-audit --no-fund --silent  # the Node peers; rows say "skipped" without it
	$(PY) -m bench $(ARGS)

# Not in CI: hours of churn against `monotape run`, then a PASS/FAIL verdict (docs/soak.md).
# make soak HOURS=8 RATE=1.3 (defaults: 1 h at 1.3x); more flags: ARGS='--report-every 60'.
.PHONY: soak
soak: $(STAMP)
	HOURS="$(HOURS)" RATE="$(RATE)" $(PY) -m monotape.loadgen.soak $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
