"""cocotb tests of the generated attention_top in Icarus: the bus protocol (random AXI4-Lite
timing), every error and its recovery, reset in mid-run, and a smaller set of layers (the
whole-layer sweep in Verilator runs through the fast path: tests/test_fast_layers.py)."""

from __future__ import annotations

import pytest

import golden as g
from hw.attention_top import AttentionTop
from hw.gen.verilog import REPO_ROOT
from sim.layers import STALLS, whole_top_configs
from sim.runner import run_cocotb, verilog_for

TINY = g.load_config(REPO_ROOT / "configs" / "tiny.toml")
CONFIGS = whole_top_configs(TINY)


# (The tiled configuration runs under stalls in the Verilator harness tests; here without,
# to keep the Icarus run short.)
CASES = [("tiny", "stalls"), ("tiny-2eng", "none"), ("narrow", "stalls"), ("tiled", "none"),
         ("wide", "stalls")]


@pytest.mark.cocotb
@pytest.mark.parametrize("simulator", ["icarus"])
@pytest.mark.parametrize("config,stalls", CASES)
def test_attention_top(simulator, config, stalls):
    cfg = CONFIGS[config]
    top = verilog_for(AttentionTop, cfg, "attention_top")
    idle, bp = STALLS[stalls]
    run_cocotb(sources=[top.verilog], toplevel="attention_top", test_module="tests.cocotb.top_tb",
               simulator=simulator, run_name=f"top-{config}-{stalls}",
               extra_env={"ATTN_CONFIG": str(top.config), "ATTN_SEED": "3",
                          "ATTN_IDLE": str(idle), "ATTN_BACKPRESSURE": str(bp)})
