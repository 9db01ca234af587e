"""The generator's command line: outputs, lint, and refusal of bad configurations."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hw.__main__ import main
from hw.gen.verilog import REPO_ROOT

OUT = REPO_ROOT / "build" / "test-cli"


def test_generate_writes_everything(capsys):
    out = OUT / "gen"
    assert main(["generate", "--config", "configs/tiny.toml", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("attention_top.v", "attention_top.f", "regmap.json", "attention_regs.h",
                 "config.json", "config.toml", "attention_top.sdc", "attention_top.xdc",
                 "attention_top.core"):
        assert (out / name).stat().st_size > 0
        assert name in printed
    verilog = (out / "attention_top.v").read_text()
    assert "module attention_top(" in verilog
    for port in ("s_axi_awaddr", "s_axi_rdata", "s_axis_tdata", "s_axis_tlast",
                 "m_axis_tvalid", "m_axis_tready", "irq"):
        assert port in verilog.split(");")[0], port
    assert json.loads((out / "config.json").read_text())["model"]["d_model"] == 16
    assert json.loads((out / "regmap.json").read_text())
    assert "create_clock -name clk -period 10.000 [get_ports clk]" in \
        (out / "attention_top.sdc").read_text()
    assert "name: attention-accel:ip:attention_top:" in (out / "attention_top.core").read_text()


def test_clock_option_sets_the_constraint_period():
    out = OUT / "clock"
    assert main(["generate", "--config", "configs/tiny.toml", "--out", str(out),
                 "--clock-mhz", "150"]) == 0
    assert "-period 6.667 " in (out / "attention_top.sdc").read_text()
    assert "-period 6.667 " in (out / "attention_top.xdc").read_text()


def test_bad_clock_is_refused(capsys):
    out = OUT / "bad-clock"
    assert main(["generate", "--config", "configs/tiny.toml", "--out", str(out),
                 "--clock-mhz", "0"]) == 2
    assert "--clock-mhz" in capsys.readouterr().err
    assert not out.exists()


def test_lint_clean_with_documented_waivers():
    assert main(["lint", "--config", "configs/tiny.toml", "--out", str(OUT / "lint")]) == 0


@pytest.mark.parametrize("text,field", [
    ("[model]\nd_model = 18\nheads = 4\nhead_dim = 4\n", "d_model"),
    ("[array]\narray_rows = 0\n", "array_rows"),
    ("[model]\nbogus = 1\n", "bogus"),
    ("[widths]\nacc_bits = 16\n", "acc_bits"),
])
def test_bad_config_is_refused_and_nothing_written(tmp_path, text, field):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    out = OUT / "refused"
    if out.exists():
        for p in out.iterdir():
            p.unlink()
    proc = subprocess.run([sys.executable, "-m", "hw", "generate", "--config", str(cfg),
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 2
    assert field in proc.stderr and "error:" in proc.stderr
    assert not out.exists() or not any(out.iterdir())


def test_help_lists_commands():
    proc = subprocess.run([sys.executable, "-m", "hw", "--help"], capture_output=True,
                          text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0
    for cmd in ("generate", "lint", "config"):
        assert cmd in proc.stdout
