"""Run tests/cocotb/matmul_tb.py on the generated MatmulEngine Verilog in Icarus and Verilator."""

from __future__ import annotations

import fcntl

import pytest

from golden import load_config
from hw.blocks.matmul import MatmulEngine
from hw.gen.verilog import REPO_ROOT, write_verilog
from sim.runner import run_cocotb

CONFIG = "configs/tiny.toml"
ARRAYS = [(4, 4), (2, 3)]
STALLS = {"nostall": (0.0, 0.0), "stall": (0.3, 0.4)}


def engine_verilog(rows: int, cols: int):
    """Generate (once per content, under a lock shared by xdist workers) the engine Verilog."""
    path = REPO_ROOT / "build" / "verilog" / "matmul" / f"matmul_engine_{rows}x{cols}.v"
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = load_config(REPO_ROOT / CONFIG).replace(array_rows=rows, array_cols=cols)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        write_verilog(MatmulEngine(cfg), "matmul_engine", path)
    return path


@pytest.mark.cocotb
@pytest.mark.parametrize("stall", list(STALLS))
@pytest.mark.parametrize("rows,cols", ARRAYS)
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_matmul_cocotb(simulator, rows, cols, stall):
    idle, backpressure = STALLS[stall]
    run_cocotb(sources=[engine_verilog(rows, cols)], toplevel="matmul_engine",
               test_module="tests.cocotb.matmul_tb", simulator=simulator,
               run_name=f"matmul-{rows}x{cols}-{stall}",
               extra_env={"MATMUL_CONFIG": str(REPO_ROOT / CONFIG), "MATMUL_ROWS": str(rows),
                          "MATMUL_COLS": str(cols), "MATMUL_SEED": str(rows * 10 + cols),
                          "MATMUL_IDLE": str(idle), "MATMUL_BACKPRESSURE": str(backpressure)})
