# Both entry points bootstrap their own virtual environment from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit bench clean

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

bench: $(STAMP)
	$(PY) -m bench $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
