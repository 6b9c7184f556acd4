# The developer interface: `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.deps-stamp
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: deps build demo test test-rust test-python bench calibrate clean-venv

$(STAMP): requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

deps: $(STAMP)

build: deps
	cd $(CURDIR) && maturin develop --release --quiet

demo: build
	autoslo demo

test-rust:
	cargo test -p autoslo-core --quiet

test-python: build
	$(PY) -m pytest -q

test: build test-rust test-python

bench:
	cargo bench -p autoslo-core --bench emulator

calibrate: build
	autoslo calibrate

clean-venv:
	rm -rf $(VENV)
