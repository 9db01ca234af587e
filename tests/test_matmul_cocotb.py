"""Run tests/cocotb/matmul_tb.py on the generated MatmulEngine Verilog in Icarus and Verilator."""

from __future__ import annotations

import pytest

from golden import load_config
from hw.blocks.matmul import MatmulEngine
from hw.gen.verilog import REPO_ROOT
from sim.runner import run_cocotb, verilog_for

CONFIG = "configs/tiny.toml"
ARRAYS = [(4, 4, 0), (2, 3, 0), (4, 4, 2)]      # rows, columns, requantizer lanes
STALLS = {"nostall": (0.0, 0.0), "stall": (0.3, 0.4)}


def engine_verilog(rows: int, cols: int, lanes: int = 0):
    """The engine's Verilog for an array of ``rows x cols`` with ``lanes`` requantizer lanes
    (sim.runner's build cache)."""
    cfg = load_config(REPO_ROOT / CONFIG).replace(array_rows=rows, array_cols=cols,
                                                  requant_lanes=lanes)
    return verilog_for(MatmulEngine, cfg, "matmul_engine").verilog


@pytest.mark.cocotb
@pytest.mark.parametrize("stall", list(STALLS))
@pytest.mark.parametrize("rows,cols,lanes", ARRAYS)
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_matmul_cocotb(simulator, rows, cols, lanes, stall):
    idle, backpressure = STALLS[stall]
    run_cocotb(sources=[engine_verilog(rows, cols, lanes)], toplevel="matmul_engine",
               test_module="tests.cocotb.matmul_tb", simulator=simulator,
               run_name=f"matmul-{rows}x{cols}-l{lanes}-{stall}",
               extra_env={"MATMUL_CONFIG": str(REPO_ROOT / CONFIG), "MATMUL_ROWS": str(rows),
                          "MATMUL_COLS": str(cols), "MATMUL_LANES": str(lanes),
                          "MATMUL_SEED": str(rows * 10 + cols),
                          "MATMUL_IDLE": str(idle), "MATMUL_BACKPRESSURE": str(backpressure)})
