# Rebalancer: `make run` starts the controller, `make test` runs the tests, `make bench` the benchmarks.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-fast lint bench demo clean

$(VENV)/.installed-base: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[server]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-base

run: $(VENV)/.installed-base
	mkdir -p data
	$(VENV)/bin/rebalancer serve --host $(HOST) --port $(PORT)

test: $(VENV)/.installed-dev
	$(PY) -m pytest -q

# Everything but the slow, Spark and PostgreSQL tests, on every core (pytest-xdist): about 80 s on 2 cores.
test-fast: $(VENV)/.installed-dev
	$(PY) -m pytest -q -n auto -m "not slow and not spark and not postgres"

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Each benchmark writes bench-results/<name>.json (and PNG plots where useful); `make bench BENCH_ARGS=--quick`
# runs the reduced versions.
BENCHES ?= albic_milp albic_collocation gedik groupings api
bench: $(VENV)/.installed-dev
	mkdir -p bench-results
	for b in $(BENCHES); do \
	  if [ -f benchmarks/bench_$$b.py ]; then echo "== bench $$b" >&2; $(PY) -m benchmarks.bench_$$b $(BENCH_ARGS) || exit 1; fi; \
	done
	echo "== bench spark_routing" >&2; PYSPARK_PYTHON=$(PY) $(PY) -m benchmarks.bench_spark_routing $(BENCH_ARGS) --output bench-results/spark_routing.json
	echo "== bench spark_state" >&2; PYSPARK_PYTHON=$(PY) $(PY) -m benchmarks.bench_spark_state $(BENCH_ARGS) --output bench-results/spark_state.json

demo: $(VENV)/.installed-dev
	mkdir -p bench-results
	$(PY) -m benchmarks.spark_demo

clean:
	rm -rf $(VENV) bench-results data .pytest_cache
