# Both entry points bootstrap their own virtual environment from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint typecheck unit bench clean

# setup.py and the C sources too: pip rebuilds the native extensions in place (issues 12, 13).
NATIVE_SOURCES := monotape/platform/server/_sendmany.c monotape/platform/core/_fields.c \
  monotape/platform/core/_payloads.c monotape/platform/core/_admit.c \
  monotape/platform/wire/_records.c monotape/platform/ring/_table.c
$(STAMP): pyproject.toml setup.py $(NATIVE_SOURCES)
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

# Two pytest workers (pytest-xdist): most of the suite waits on real servers, sockets and
# timers, not on a core, so two at once took the suite from 15:16 to 9:34 on a 2-core box
# (every test passing either way). TEST_WORKERS=0 runs it in one process (a test's own output,
# a debugger).
TEST_WORKERS ?= 2
WORKERS_ARGS = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS))

unit: $(STAMP)
	$(VENV)/bin/pytest -q $(WORKERS_ARGS) $(PYTEST_ARGS)

test: lint typecheck unit

# The quick loop while editing (a few minutes): lint, types and every test that starts no
# server and is not marked slow. `make test` (~10 minutes on 2 cores) runs everything.
test-fast: lint typecheck
	$(VENV)/bin/pytest -q $(WORKERS_ARGS) -m "not e2e and not slow" $(PYTEST_ARGS)

bench: $(STAMP)
	-npm ci --prefix bench/node --no-audit --no-fund --silent  # the Node peers; rows say "skipped" without it
	$(PY) -m bench $(ARGS)

# Not in CI: hours of churn against `monotape run`, then a PASS/FAIL verdict (docs/soak.md).
# make soak HOURS=8 RATE=1.3 (defaults: 1 h at 1.3x); more flags: ARGS='--report-every 60'.
.PHONY: soak
soak: $(STAMP)
	HOURS="$(HOURS)" RATE="$(RATE)" $(PY) -m monotape.loadgen.soak $(ARGS)

# The native extensions' tests (send loop, field read, record encoders, table puts) against an
# AddressSanitizer + UndefinedBehaviorSanitizer build of each, compiled in a scratch dir (the
# venv's own build is untouched). The interpreter is not instrumented, so libasan is preloaded;
# PYTHONMALLOC=malloc puts Python's objects (the payloads) under ASan's allocator; detect_leaks=0
# because CPython keeps its own objects until exit.
# --capture=sys leaves file descriptor 2 alone, so a sanitizer's report reaches the terminal.
SANITIZE_DIR := build/native-sanitize
.PHONY: native-sanitize
SANITIZE_CC = $(CC) -shared -fPIC -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
  -fno-sanitize-recover=all -Wall -Wextra -Werror \
  -I"$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
SANITIZE_RUN = LD_PRELOAD="$$($(CC) -print-file-name=libasan.so)" PYTHONMALLOC=malloc \
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:abort_on_error=1
SANITIZE_PYTEST = $(VENV)/bin/pytest -q -p no:cacheprovider --capture=sys
native-sanitize: $(STAMP)
	rm -rf $(SANITIZE_DIR) && mkdir -p $(SANITIZE_DIR)
	$(SANITIZE_CC) monotape/platform/server/_sendmany.c -o $(SANITIZE_DIR)/_sendmany.so
	$(SANITIZE_RUN) SENDMANY_SANITIZED_BUILD=$(SANITIZE_DIR)/_sendmany.so \
	  $(SANITIZE_PYTEST) tests/server/test_sendmany.py tests/server/test_send_table.py
	$(SANITIZE_CC) monotape/platform/core/_fields.c -o $(SANITIZE_DIR)/_fields.so
	$(SANITIZE_RUN) FIELDS_SANITIZED_BUILD=$(SANITIZE_DIR)/_fields.so \
	  $(SANITIZE_PYTEST) tests/core/test_fields.py
	$(SANITIZE_CC) monotape/platform/core/_payloads.c -o $(SANITIZE_DIR)/_payloads.so
	$(SANITIZE_RUN) PAYLOADS_SANITIZED_BUILD=$(SANITIZE_DIR)/_payloads.so \
	  $(SANITIZE_PYTEST) tests/core/test_payloads.py
	$(SANITIZE_CC) monotape/platform/core/_admit.c -o $(SANITIZE_DIR)/_admit.so
	$(SANITIZE_RUN) ADMIT_SANITIZED_BUILD=$(SANITIZE_DIR)/_admit.so \
	  $(SANITIZE_PYTEST) tests/core/test_admit_batch.py tests/feeds/test_normalize.py
	# the set walk Python 3.13 builds (an iterator over each set of signatures), on this Python
	$(SANITIZE_CC) -DPAYLOADS_SET_ITERATOR monotape/platform/core/_payloads.c \
	  -o $(SANITIZE_DIR)/_payloads_iter.so
	$(SANITIZE_RUN) PAYLOADS_SANITIZED_BUILD=$(SANITIZE_DIR)/_payloads_iter.so \
	  $(SANITIZE_PYTEST) tests/core/test_payloads.py
	$(SANITIZE_CC) monotape/platform/wire/_records.c -o $(SANITIZE_DIR)/_records.so
	$(SANITIZE_RUN) RECORDS_SANITIZED_BUILD=$(SANITIZE_DIR)/_records.so \
	  $(SANITIZE_PYTEST) tests/wire/test_records_native.py
	$(SANITIZE_CC) monotape/platform/ring/_table.c -o $(SANITIZE_DIR)/_table.so
	$(SANITIZE_RUN) TABLE_SANITIZED_BUILD=$(SANITIZE_DIR)/_table.so \
	  $(SANITIZE_PYTEST) tests/ring/test_table.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
