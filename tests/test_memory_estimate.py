"""The block RAM estimate per buffer (hw/perf/memory.py)."""

import golden as g
from hw.gen.verilog import REPO_ROOT
from hw.perf.memory import buffer_ram, dp16kd_blocks

DEFAULT = g.load_config(REPO_ROOT / "configs" / "default.toml")


def test_aspect_ratios():
    assert dp16kd_blocks(512, 36) == 1
    assert dp16kd_blocks(1024, 18) == 1
    assert dp16kd_blocks(1024, 32) == 2          # two 512 x 36 or two 1024 x 18
    assert dp16kd_blocks(16384, 1) == 1
    assert dp16kd_blocks(100, 168) == 5          # 512 x 36, five wide


def test_tiled_score_buffers_do_not_grow_with_length():
    def blocks(cfg):
        return {b.name: b.blocks for b in buffer_ram(cfg)}
    short = blocks(DEFAULT.replace(kv_tile=64, q_tile=60))
    long = blocks(DEFAULT.replace(max_seq_len=256, max_kv_len=256, kv_tile=64, q_tile=60))
    assert short["s"] == long["s"] and short["p"] == long["p"]
    assert long["x"] > short["x"] and long["v"] > short["v"]
    whole = blocks(DEFAULT.replace(max_seq_len=128, max_kv_len=128))
    assert whole["s"] > blocks(DEFAULT)["s"]
