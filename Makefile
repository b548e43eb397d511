# Entry points for people: `make demo`, `make test` (what CI runs) and `make test-fast` (the
# inner loop). All create .venv on first use.
PYTHON ?= python3
# Bytecode cached in __pycache__/ (ignored by git) even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE=1 here): otherwise every xdist worker compiles and rewrites
# every test module, and every runtime a test starts compiles the runtime, from source:
# collecting the suite took 9.0 CPU-s a process that way, 3.3 with the cache.
export PYTHONDONTWRITEBYTECODE :=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean venv browser

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

# Parallel workers (pytest-xdist), each with its own embedded broker; the Spark tests share
# two workers and their JVMs. The suite waits on brokers and sockets as well as computing,
# so more workers than cores pay: alone, 6 workers kept the cores 89% busy (5 min 9 s at
# ad2ff1c), 8 workers fill the waits (4 min 43 s, the same commit, minutes apart).
# docs/testing.md says what each folder covers.
TEST_WORKERS ?= 8
PYTEST := $(BIN)/python -m pytest -q -rs -p no:cacheprovider
# pytest's exit code 5 (no tests collected) must fail the target, not pass it
NO_TESTS_FAIL := rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; \
	exit 1; fi; exit $$rc

# A class-data archive of the Spark JVMs the tests start, once per installed venv: each
# session, follow job and cluster driver then starts from mapped classes (about 5 CPU-s
# less each; tests/spark/class_archive.py). Without Java or PySpark it writes nothing.
SPARK_CLASSES := $(VENV)/spark-classes.jsa
$(SPARK_CLASSES): $(STAMP)
	$(BIN)/python -m tests.spark.class_archive $@

test: $(STAMP) $(SPARK_CLASSES) lint browser
	@echo "load average before: $$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup tests; $(NO_TESTS_FAIL)

# The inner loop: unit and state-machine tests (tests/unit), no broker, no Spark, <= 30 s.
# Two workers: the tests are all CPU (about 26 CPU-s serially, 30 s of wall at 1,051
# tests), and a worker's own start-up costs less than the core it adds.
FAST_WORKERS ?= 2
test-fast: $(STAMP)
	$(PYTEST) -n $(FAST_WORKERS) -m "not integration and not spark and not chaos" tests/unit; \
	$(NO_TESTS_FAIL)

bench: $(STAMP)
	$(BIN)/python bench/timer_wheel.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
