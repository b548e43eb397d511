# Two entry points for people: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean venv browser

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/hookstream config/demo.toml

lint: $(STAMP)
	$(BIN)/ruff check runtime actors tests bench
	$(BIN)/mypy

# The status page is tested in Debian's Chromium; install it when missing (the test is
# skipped, saying why, where no package manager can).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
	  { $(SUDO) apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { $(SUDO) apt-get update -q >/dev/null 2>&1 && \
	      $(SUDO) apt-get install -y -q chromium >/dev/null 2>&1; }; }; } || \
	  echo "chromium could not be installed: the browser test will be skipped"

test: $(STAMP) lint browser
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

bench: $(STAMP)
	$(BIN)/python bench/timer_wheel.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
