"""The Icarus Verilog harness (sim/harness/attention_top_tb.v): the C++ harness's scripts,
stall pattern and records in Icarus, with no Python per cycle. Same records as the Verilator
harness for the same script (cycles included), every output against golden, errors and hangs
reported as the C++ harness reports them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import golden as g
from hw.attention_top import AttentionTop
from hw.gen.verilog import REPO_ROOT
from sim.fast import HarnessError, HarnessTimeout, Script, run_script
from sim.host import RunError, Sequence, run_layer
from sim.layers import make_case, mode_specs, whole_top_configs
from sim.runner import verilog_for

CONFIGS = whole_top_configs(g.load_config(REPO_ROOT / "configs" / "tiny.toml"))


def sequences(runs):
    return [Sequence(r["x"], r.get("kv"), r["causal"], r["key_len"], r["pos_enc"],
                     r["pe_offset"], r["grid_width"]) for r in runs]


@pytest.mark.cocotb
@pytest.mark.parametrize("overlapped", [False, True])
def test_same_results_as_the_verilator_harness(overlapped):
    """``narrow`` (two softmax lanes, cross-attention, both positional encodings) under
    input idle and output backpressure: every mode of the test sweep gives the golden output
    and the same counters and end cycles in both harnesses."""
    cfg = CONFIGS["narrow"]
    layer, runs = make_case(cfg, 4, mode_specs(cfg)[::2] if overlapped else mode_specs(cfg))
    seqs = sequences(runs)
    kw = dict(idle=0.3, backpressure=0.4, seed=7, overlapped=overlapped)
    icarus = run_layer(cfg, layer, seqs, sim="fast-icarus", **kw)
    verilator = run_layer(cfg, layer, seqs, sim="verilator", harness_opt="-O0", **kw)
    for i, (s, a, b) in enumerate(zip(seqs, icarus, verilator)):
        assert np.array_equal(a.out, s.golden(cfg, layer)), f"sequence {i}: wrong output"
        assert (a.cycles, a.busy_cycles, a.stall_cycles, a.status, a.end_cycle) == \
            (b.cycles, b.busy_cycles, b.stall_cycles, b.status, b.end_cycle), i


@pytest.mark.cocotb
def test_errors_and_hangs_are_reported():
    cfg = CONFIGS["narrow"]
    n = min(cfg.max_seq_len, cfg.max_kv_len)
    layer, runs = make_case(cfg, 2, [dict(seq=n)])
    with pytest.raises(RunError, match="sequence 0: .*BAD_POSENC"):
        run_layer(cfg, layer, [Sequence(runs[0]["x"], pos_enc="2d", grid_width=n - 1)],
                  sim="fast-icarus")
    top = verilog_for(AttentionTop, cfg, "attention_top")
    script = Script()
    script.settings(seed=0, idle=0.0, backpressure=0.0, limit=300)
    script.add("reset", 4)
    script.add("send", *script.put([1, 2, 3]))
    script.add("wait_out", 1)
    with pytest.raises(HarnessTimeout, match="wait_out still waiting"):
        run_script(top.verilog, script, simulator="icarus")
    script = Script()
    script.add("frobnicate 1")
    with pytest.raises(HarnessError, match="bad script line 1"):
        run_script(top.verilog, script, simulator="icarus")


@pytest.mark.cocotb
def test_fast_icarus_soak_matches_the_verilator_one():
    """The soak's events (runs, bad settings, misuse, resets) on both harnesses: clean, and
    the same simulated cycles event by event."""
    from sim.soak_fast import run_fast_soak
    cfg = CONFIGS["tiny"]
    out = REPO_ROOT / "build" / "test-soak-fast-icarus"
    a = run_fast_soak(cfg, 1500, seed=5, out=out, simulator="icarus")
    b = run_fast_soak(cfg, 1500, seed=5, out=out, opt="-O0")
    assert a["mismatches"] == a["hangs"] == a["failed_events"] == 0, a
    assert (a["events"], a["values"], a["sim_cycles"]) == (b["events"], b["values"],
                                                          b["sim_cycles"])
    ev_a = (out / "tiny-fast-icarus" / "events.jsonl").read_text().splitlines()
    ev_b = (out / "tiny-fast" / "events.jsonl").read_text().splitlines()
    assert [json.loads(e) for e in ev_a] == [json.loads(e) for e in ev_b]
