# Two entry points for people: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m runtime config/demo.toml

lint: $(STAMP)
	$(BIN)/ruff check runtime actors tests bench
	$(BIN)/mypy

test: $(STAMP) lint
	$(BIN)/python -m pytest -q -p no:cacheprovider tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

bench: $(STAMP)
	$(BIN)/python bench/timer_wheel.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
