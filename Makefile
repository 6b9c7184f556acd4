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

.PHONY: postgres deps build demo test test-rust test-python test-wheel bench bench-ray bench-route-idle calibrate models clean-venv

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

build: deps
	cd $(CURDIR) && maturin develop --release --quiet

demo: build
	autoslo demo

test-rust: deps postgres
	LD_LIBRARY_PATH=$(TORCH_LIB) cargo test -p autoslo-core --features torch --quiet
	cargo test -p autoslo-cloud --quiet

test-python: build postgres
	$(PY) -m pytest -q

# The install a user does: build the wheel, install it into a fresh venv, run the CLI and the API
# from a directory outside the clone.
WHEEL_VENV := $(abspath target/wheel-venv)
test-wheel: build
	rm -rf target/wheels $(WHEEL_VENV)
	maturin build --release --quiet --out target/wheels
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install --quiet target/wheels/autoslo-*.whl
	cd $$(mktemp -d) && $(WHEEL_VENV)/bin/autoslo demo --queries-per-day 2000 >/dev/null && \
	  $(WHEEL_VENV)/bin/python -c "import autoslo, pathlib; assert 'site-packages' in autoslo.__file__, autoslo.__file__; \
	  r = autoslo.emulate(autoslo.base_workload(0.2, seed=1, kappa=2), [32, 16]); print('wheel ok:', r.summary())"

test: build test-rust test-wheel test-python

bench: deps
	cargo bench -p autoslo-core --bench emulator --bench billing
	LD_LIBRARY_PATH=$(TORCH_LIB) cargo bench -p autoslo-core --features torch --bench predictor --bench router --bench autoscaler --bench tuner

# Live routing from Python at 8 x 32 running, arrivals back to back, 50 ms and 2 s apart (about 2 min).
bench-route-idle: build
	$(PY) benches/route_after_idle.py

# SimulateBatch on rayon and on a local Ray cluster (20 workloads x 15k queries), and Ray's cost per task.
bench-ray: build
	$(PY) benches/simulate_batch_ray.py

calibrate: build
	autoslo calibrate

# Rebuild the bundled predictor models (Stage + the four ablation variants) into python/autoslo/models,
# and their cards and training configurations into models/.
models: build
	autoslo predictor bundle
	autoslo predictor cards --out models

clean-venv:
	rm -rf $(VENV)
