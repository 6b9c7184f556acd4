# The developer interface: `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.deps-stamp
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)
# tch builds against the venv's torch==2.13.0; tests and benches load its libraries.
export LIBTORCH_USE_PYTORCH := 1
TORCH_LIB = $(abspath $(VENV))/lib/python3.11/site-packages/torch/lib

# The PostgreSQL server programs behind the local Redshift Serverless endpoint (live mode and its tests).
PG_CTL := $(firstword $(wildcard /usr/lib/postgresql/*/bin/pg_ctl))

.PHONY: postgres deps build demo test test-all test-rust test-rust-live test-python test-live test-python-all test-wheel wheel reproduce bench bench-ray bench-route-idle bench-hindsight bench-history calibrate models clean-venv

$(STAMP): requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

deps: $(STAMP)

postgres:
ifeq ($(PG_CTL),)
	command -v pg_ctl >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
endif

# One build of the Rust graph serves everything below: the extension, `cargo test` and the wheel
# check compile in the `fast` profile (Cargo.toml) with the same features, so each step reuses
# the others' artifacts. Only `make wheel` (a distribution wheel, LTO) builds in `release`.
CARGO_TEST := LD_LIBRARY_PATH=$(TORCH_LIB) cargo test --profile fast -p autoslo-core -p autoslo-cloud --features autoslo-core/torch

build: deps
	cd $(CURDIR) && maturin develop --profile fast --quiet

demo: build
	autoslo demo

# The default tier: the core's and the cloud crate's unit tests, the cluster manager against one
# local endpoint, and pytest's default tier (no slow, reproduce, live, notebook or scaleout test).
test-rust: deps postgres
	$(CARGO_TEST) --lib --test manager

test-python: build postgres
	$(PY) -m pytest

test: build test-rust test-python

# The live tier: live runs and serving on local PostgreSQL servers, from Rust and from Python.
test-rust-live: deps postgres
	$(CARGO_TEST) --test live --test serve

test-live: build test-rust-live
	$(PY) -m pytest -m live

# Every tier: what `make test` runs, the live tier, the slow, reproduce, notebook and scale-out
# tiers, and the wheel check.
test-python-all: build postgres
	$(PY) -m pytest -m ""

test-all: build test-rust test-rust-live test-python-all test-wheel

# The install a user does: build the wheel (from the same build as the tests), install it into a
# fresh venv, run the CLI and the API from a directory outside the clone.
WHEEL_VENV := $(abspath target/wheel-venv)
test-wheel: build
	rm -rf target/wheels $(WHEEL_VENV)
	maturin build --profile fast --quiet --interpreter $(PY) --out target/wheels
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install --quiet --no-cache-dir target/wheels/autoslo-*.whl
	cd $$(mktemp -d) && $(WHEEL_VENV)/bin/autoslo demo --queries-per-day 2000 --hindsight-plans 16 >/dev/null && \
	  $(WHEEL_VENV)/bin/python -c "import autoslo, pathlib; assert 'site-packages' in autoslo.__file__, autoslo.__file__; \
	  r = autoslo.emulate(autoslo.base_workload(0.2, seed=1, kappa=2), [32, 16]); print('wheel ok:', r.summary())"
	# The fresh venv holds a second torch (about 6 GB): free the disk once the check has passed.
	rm -rf $(WHEEL_VENV) target/wheels

# A distribution wheel: release profile, thin LTO.
wheel: deps
	maturin build --release --interpreter $(PY) --out target/wheels

# The paper's reproductions at the reported size, into docs/results.
reproduce: build
	autoslo reproduce all --out docs/results

bench: deps
	cargo bench -p autoslo-core --bench emulator --bench billing --bench sql
	LD_LIBRARY_PATH=$(TORCH_LIB) cargo bench -p autoslo-core --features torch --bench predictor --bench router --bench autoscaler --bench tuner

# Live routing from Python at 8 x 32 running, arrivals back to back, 50 ms and 2 s apart (about 2 min).
bench-route-idle: build
	$(PY) benches/route_after_idle.py

# SimulateBatch on rayon and on a local Ray cluster (20 workloads x 15k queries), and Ray's cost per task.
bench-ray: build
	$(PY) benches/simulate_batch_ray.py

# The best plan in hindsight: 500 plans on one 20k-query day (about 5 minutes on 2 cores).
bench-hindsight: build
	$(PY) benches/hindsight.py

# Importing a 1,000,000-statement query history with TPC-DS texts (time, peak memory), and the
# routing-time costs of a new statement's class and features (about 2 min).
bench-history: build
	$(PY) benches/history_import.py

calibrate: build
	autoslo calibrate

# Rebuild the bundled predictor models (Stage + the four ablation variants) into python/autoslo/models,
# and their cards and training configurations into models/.
models: build
	autoslo predictor bundle
	autoslo predictor cards --out models

clean-venv:
	rm -rf $(VENV)
