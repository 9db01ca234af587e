"""Run tests/cocotb/axi_lite_tb.py on the generated AxiLiteRegs Verilog in Icarus and Verilator."""

from __future__ import annotations

import pytest

from golden import load_config
from hw.bus.axi_lite import AxiLiteRegs
from hw.gen.verilog import REPO_ROOT
from sim.runner import run_cocotb, verilog_for

DELAYS = {"nodelay": 0.0, "delay": 0.35}


def regs_verilog(config: str):
    """The block's Verilog for ``configs/<config>.toml`` (sim.runner's build cache)."""
    cfg = load_config(REPO_ROOT / "configs" / f"{config}.toml")
    return verilog_for(AxiLiteRegs, cfg, "axi_lite_regs").verilog


def run(simulator: str, config: str, delay: str):
    run_cocotb(sources=[regs_verilog(config)], toplevel="axi_lite_regs",
               test_module="tests.cocotb.axi_lite_tb", simulator=simulator,
               run_name=f"axi_lite-{config}-{delay}",
               extra_env={"AXIL_CONFIG": str(REPO_ROOT / "configs" / f"{config}.toml"),
                          "AXIL_SEED": str(3 + len(delay)), "AXIL_DELAY": str(DELAYS[delay])})


@pytest.mark.cocotb
@pytest.mark.parametrize("delay", list(DELAYS))
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_axi_lite_cocotb(simulator, delay):
    run(simulator, "tiny", delay)


@pytest.mark.cocotb
def test_axi_lite_cocotb_default_config():
    """The default configuration: an 18-bit address space, window at 0x20000."""
    run("icarus", "default", "delay")
