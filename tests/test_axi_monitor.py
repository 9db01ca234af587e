"""The AXI protocol monitor of the cocotb tests (sim/axi_monitor.py) reports each rule it
checks, on bare signals driven by tests/cocotb/monitor_tb.py, in both simulators."""

from __future__ import annotations

import pytest

from hw.gen.verilog import REPO_ROOT
from sim.runner import run_cocotb

FIXTURE = REPO_ROOT / "tests" / "cocotb" / "fixtures" / "axi_wires.v"


@pytest.mark.cocotb
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_axi_monitor(simulator):
    run_cocotb(sources=[FIXTURE], toplevel="axi_wires", test_module="tests.cocotb.monitor_tb",
               simulator=simulator, run_name="axi-monitor")
