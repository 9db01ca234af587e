"""Run tests/cocotb/softmax_tb.py on the generated SoftmaxUnit Verilog in Icarus and Verilator."""

from __future__ import annotations

import pytest

from golden import load_config
from hw.blocks.softmax import SoftmaxUnit
from hw.gen.verilog import REPO_ROOT
from sim.runner import run_cocotb, verilog_for

CONFIG = "configs/tiny.toml"
# (softmax_lanes, max_kv_len): tiny as is, and two lanes with longer rows.
SHAPES = {"tiny": None, "lanes2": (2, 32)}
STALLS = {"nostall": (0.0, 0.0), "stall": (0.3, 0.4)}


def softmax_cfg(shape: str):
    cfg = load_config(REPO_ROOT / CONFIG)
    if SHAPES[shape]:
        lanes, kv = SHAPES[shape]
        cfg = cfg.replace(softmax_lanes=lanes, max_seq_len=kv, max_kv_len=kv)
    return cfg


def softmax_verilog(shape: str):
    """The unit's Verilog for ``shape`` (sim.runner's build cache)."""
    return verilog_for(SoftmaxUnit, softmax_cfg(shape), "softmax_unit").verilog


@pytest.mark.cocotb
@pytest.mark.parametrize("stall", list(STALLS))
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_softmax_cocotb(simulator, shape, stall):
    idle, backpressure = STALLS[stall]
    env = {"SOFTMAX_CONFIG": str(REPO_ROOT / CONFIG), "SOFTMAX_SEED": str(len(shape) * 7 + 1),
           "SOFTMAX_ROWS": "500", "SOFTMAX_IDLE": str(idle),
           "SOFTMAX_BACKPRESSURE": str(backpressure)}
    if SHAPES[shape]:
        env.update(SOFTMAX_LANES=str(SHAPES[shape][0]), SOFTMAX_MAX_KV=str(SHAPES[shape][1]))
    run_cocotb(sources=[softmax_verilog(shape)], toplevel="softmax_unit",
               test_module="tests.cocotb.softmax_tb", simulator=simulator,
               run_name=f"softmax-{shape}-{stall}", extra_env=env)
