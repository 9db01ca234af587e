"""Toolchain checks of the matrix engine: Verilator -Wall lint with the documented waivers,
and ECP5 synthesis mapping every PE multiplier to one MULT18X18D."""

from __future__ import annotations

import subprocess

import pytest

from golden import load_config
from hw.gen.verilog import REPO_ROOT
from sim.runner import verilator_bin_dir
from tests.test_matmul_cocotb import CONFIG, engine_verilog

# Each waiver is explained in docs/hardware.md, section "Matrix engine".
LINT_WAIVERS = ["DECLFILENAME", "PROCASSINIT", "STMTDLY", "UNUSEDSIGNAL", "WIDTHEXPAND",
                "WIDTHTRUNC", "CASEINCOMPLETE"]


@pytest.mark.parametrize("rows,cols,lanes", [(4, 4, 0), (2, 3, 0), (4, 4, 2)])
def test_matmul_verilog_lint(rows, cols, lanes):
    path = engine_verilog(rows, cols, lanes)
    cmd = [str(verilator_bin_dir() / "verilator"), "--lint-only", "-Wall", "--no-timing",
           "--top-module", "matmul_engine", *(f"-Wno-{w}" for w in LINT_WAIVERS), str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0 and "%Warning" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.synth
def test_array_synthesis_maps_one_dsp_per_pe():
    from hw.flow.synth_matmul import array_stats
    cfg = load_config(REPO_ROOT / CONFIG)
    stats = array_stats(cfg, 4, 4)
    assert stats["MULT18X18D"] == 16, stats
    assert stats["TRELLIS_FF"] > 0 and stats["LUT4"] > 0
