"""End-to-end cocotb tests of the generated attention_top in Icarus and Verilator."""

from __future__ import annotations

import hashlib

import pytest

import golden as g
from hw.attention_top import AttentionTop
from hw.gen.verilog import REPO_ROOT, write_verilog
from sim.runner import BUILD_ROOT, run_cocotb

TINY = g.load_config(REPO_ROOT / "configs" / "tiny.toml")
CONFIGS = {
    # one engine, 4x4, causal + cross-attention
    "tiny": TINY,
    # two head engines in parallel
    "tiny-2eng": TINY.replace(name="tiny-2eng", engines=2),
    # non-square array, two softmax lanes, longer sequences
    "narrow": TINY.replace(name="narrow", array_rows=2, array_cols=4, softmax_lanes=2,
                           max_seq_len=12, max_kv_len=10),
}
STALLS = {"none": (0.0, 0.0), "stalls": (0.3, 0.4)}


def top_verilog(cfg) -> tuple:
    toml = cfg.to_toml()
    key = hashlib.sha256(toml.encode()).hexdigest()[:12]
    folder = BUILD_ROOT / "verilog" / f"top-{cfg.name}-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(toml)
    # Regenerated every time (a few seconds): the file only changes when the hardware does,
    # and the simulator builds are keyed on its contents.
    path = write_verilog(AttentionTop(cfg), "attention_top", folder / "attention_top.v")
    return path, folder / "config.toml"


CASES = [("tiny", "none"), ("tiny", "stalls"), ("tiny-2eng", "none"), ("narrow", "stalls")]


@pytest.mark.cocotb
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
@pytest.mark.parametrize("config,stalls", CASES)
def test_attention_top(simulator, config, stalls):
    cfg = CONFIGS[config]
    verilog, toml = top_verilog(cfg)
    idle, bp = STALLS[stalls]
    run_cocotb(sources=[verilog], toplevel="attention_top", test_module="tests.cocotb.top_tb",
               simulator=simulator, run_name=f"top-{config}-{stalls}",
               extra_env={"ATTN_CONFIG": str(toml), "ATTN_SEED": "3",
                          "ATTN_IDLE": str(idle), "ATTN_BACKPRESSURE": str(bp)})
