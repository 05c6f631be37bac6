# Rebalancer: `make run` starts the controller, `make test` runs the tests, `make bench` the benchmarks.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test bench demo clean

$(VENV)/.installed-base: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
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

# Each benchmark writes bench-results/<name>.json (and PNG plots where useful); `make bench BENCH_ARGS=--quick`
# runs the reduced versions.
BENCHES ?= albic_milp albic_collocation gedik groupings api
bench: $(VENV)/.installed-dev
	mkdir -p bench-results
	for b in $(BENCHES); do \
	  if [ -f evaluation/bench_$$b.py ]; then echo "== bench $$b" >&2; $(PY) -m evaluation.bench_$$b $(BENCH_ARGS) || exit 1; fi; \
	done
	echo "== bench spark_routing" >&2; PYSPARK_PYTHON=$(PY) $(PY) -m clients.spark.bench $(BENCH_ARGS) --output bench-results/spark_routing.json

demo: $(VENV)/.installed-dev
	mkdir -p bench-results
	$(PY) -m clients.spark.demo

clean:
	rm -rf $(VENV) bench-results data .pytest_cache
