"""Whole layers on the generated attention_top through the fast path (Verilator C++ harness,
:mod:`sim.fast`, :mod:`sim.host`): every mode and length, back to back and overlapped, with and
without random stalls, every output word compared with golden.attention_int; and the
harness's own guarantees (a hung design is a timeout, an unexpected STATUS.ERROR is named).
"""

from __future__ import annotations

import numpy as np
import pytest

import golden as g
from hw.attention_top import AttentionTop
from hw.bus.regmap import build_regmap
from hw.gen.verilog import REPO_ROOT
from hw.perf.layer import TOP_CYCLES, layer_timing, top_latency
from sim.fast import HarnessTimeout, Script, run_script
from sim import host
from sim.host import RunError, Sequence
from sim.layers import STALLS, make_case, mode_specs, whole_top_configs
from sim.runner import verilog_for

TINY = g.load_config(REPO_ROOT / "configs" / "tiny.toml")
CONFIGS = whole_top_configs(TINY)
# The tests' layers are tiny and short: a harness at -O0 builds in 19 s instead of 33 s
# (tiny-2eng) and the runs still take well under a second.
TEST_HARNESS_OPT = "-O0"


def run_layer(*args, **kwargs):
    return host.run_layer(*args, harness_opt=TEST_HARNESS_OPT, **kwargs)


def sequences(runs):
    return [Sequence(r["x"], r.get("kv"), r["causal"], r["key_len"], r["pos_enc"],
                     r["pe_offset"], r["grid_width"]) for r in runs]


def check_outputs(cfg, layer, seqs, results, what):
    assert len(results) == len(seqs)
    for i, (s, res) in enumerate(zip(seqs, results)):
        want = s.golden(cfg, layer)
        assert res.out.shape == want.shape, f"{what} {i}: shape {res.out.shape}"
        bad = np.argwhere(res.out != want)
        assert not len(bad), (f"{what} {i}: {len(bad)} of {want.size} outputs differ, first "
                              f"at {bad[:6].tolist()}")
        assert 0 < res.busy_cycles < res.cycles


@pytest.mark.cocotb
@pytest.mark.parametrize("stalls", list(STALLS))
@pytest.mark.parametrize("config", list(CONFIGS))
def test_layers_back_to_back_and_overlapped(config, stalls):
    cfg = CONFIGS[config]
    idle, bp = STALLS[stalls]
    layer, runs = make_case(cfg, 3, mode_specs(cfg))
    seqs = sequences(runs)
    one = run_layer(cfg, layer, seqs, idle=idle, backpressure=bp, seed=5)
    check_outputs(cfg, layer, seqs, one, "back to back")
    if stalls == "none":
        # Without stalls CYCLES is the core's cycle model plus the top's constant
        # TOP_CYCLES; STALL_CYCLES is the model's stall.
        for s, res in zip(seqs, one):
            kv = None if s.kv is None else len(s.kv)
            mode = dict(causal=s.causal, key_len=s.key_len, pos_enc=s.pos_enc,
                        additive=layer.scoring == "additive")
            model = layer_timing(cfg, len(s.x), kv, **mode)
            top = top_latency(cfg, len(s.x), kv, **mode)
            assert res.cycles == top, (res.cycles, top, s.pos_enc)
            if not cfg.pos_enc:
                assert top == model.latency + TOP_CYCLES
            assert res.stall_cycles == model.softmax_stall, (res.stall_cycles, s.pos_enc)
    # Overlapped through the double buffers, and twice the same sequence: the second ends
    # sooner after the first than one sequence takes on its own.
    both = seqs + seqs[:2] + [seqs[0], seqs[0]]
    ov = run_layer(cfg, layer, both, idle=idle, backpressure=bp, seed=6, overlapped=True)
    check_outputs(cfg, layer, both, ov, "overlapped")
    assert ov[-1].end_cycle - ov[-2].end_cycle < one[0].cycles


@pytest.mark.cocotb
def test_runs_are_repeatable_and_stalls_cost_cycles():
    cfg = CONFIGS["tiny"]
    layer, runs = make_case(cfg, 4, [dict(seq=cfg.max_seq_len)])
    seqs = sequences(runs)
    a = run_layer(cfg, layer, seqs, idle=0.3, backpressure=0.4, seed=9)[0]
    b = run_layer(cfg, layer, seqs, idle=0.3, backpressure=0.4, seed=9)[0]
    c = run_layer(cfg, layer, seqs)[0]
    assert (a.cycles, a.end_cycle) == (b.cycles, b.end_cycle)
    assert a.cycles > c.cycles
    np.testing.assert_array_equal(a.out, c.out)


@pytest.mark.cocotb
def test_unexpected_error_is_named():
    """A START the register block refuses (no weights committed) stops the run with the
    ERROR_CAUSE bits named."""
    cfg = CONFIGS["tiny"]
    rmap = build_regmap(cfg)
    top = verilog_for(AttentionTop, cfg, "attention_top")
    script = Script()
    script.settings(seed=0, idle=0.0, backpressure=0.0, limit=10_000)
    script.add("reset", 4)
    script.add("write", rmap["SEQ_LEN"].offset, 4)
    script.add("write", rmap["CTRL"].offset, 1 << rmap["CTRL"].field("START").lsb)
    script.add("expect_ok", rmap["STATUS"].offset, 1 << rmap["STATUS"].field("ERROR").lsb,
               rmap["ERROR_CAUSE"].offset, 7)
    script.add("mark")
    run = run_script(top.verilog, script, opt=TEST_HARNESS_OPT)
    x = [r for r in run.records if r[0] == "X"]
    assert len(x) == 1 and x[0][1] == 7
    assert not any(r[0] == "C" for r in run.records), "the script went on after the error"
    err = RunError(*x[0][1:])
    assert "NO_WEIGHTS" in str(err) and "sequence 7" in str(err)


@pytest.mark.cocotb
def test_refused_encoding_is_named():
    """A 2-D grid width that does not divide SEQ_LEN: the encoder's BAD_POSENC stops the
    host run with the cause named (recovery: tests/cocotb/top_tb.py, the core unit tests)."""
    cfg = CONFIGS["narrow"]
    n = min(cfg.max_seq_len, cfg.max_kv_len)
    layer, runs = make_case(cfg, 2, [dict(seq=n)])
    seq = Sequence(runs[0]["x"], pos_enc="2d", grid_width=n - 1)
    with pytest.raises(RunError, match="sequence 0: .*BAD_POSENC"):
        run_layer(cfg, layer, [seq])
    # (narrow's layers are additive: a dot-product one for the configuration without a scorer)
    dot, _ = make_case(cfg, 2, [], scoring="dot")
    with pytest.raises(ValueError, match="sequence 0: pos_enc = '2d': the configuration "
                                         "builds 1d"):
        run_layer(CONFIGS["tiny-2eng"], dot, [Sequence(runs[0]["x"][:8], pos_enc="2d",
                                                       grid_width=2)], sim="golden")
    with pytest.raises(ValueError, match="quantized for additive scoring, but tiny-2eng "
                                         "builds no additive scorer"):
        run_layer(CONFIGS["tiny-2eng"], layer, [Sequence(runs[0]["x"][:8])], sim="golden")


@pytest.mark.cocotb
def test_hung_design_is_a_timeout():
    """Waiting for output that never comes (no START) ends at the cycle limit."""
    cfg = CONFIGS["tiny"]
    top = verilog_for(AttentionTop, cfg, "attention_top")
    script = Script()
    script.settings(seed=0, idle=0.0, backpressure=0.0, limit=2_000)
    script.add("reset", 4)
    script.add("send", *script.put([1, 2, 3]))
    script.add("wait_out", 1)
    with pytest.raises(HarnessTimeout, match="wait_out still waiting"):
        run_script(top.verilog, script, opt=TEST_HARNESS_OPT)


def test_golden_engine_follows_the_model():
    cfg = CONFIGS["tiny"]
    layer, runs = make_case(cfg, 1, [dict(seq=5, causal=True)])
    res = run_layer(cfg, layer, sequences(runs), sim="golden")[0]
    assert res.cycles == layer_timing(cfg, 5).latency + TOP_CYCLES
    np.testing.assert_array_equal(res.out, g.attention_int(cfg, layer, runs[0]["x"],
                                                           causal=True))


def test_bad_requests_are_named():
    cfg = CONFIGS["tiny"]
    layer, runs = make_case(cfg, 1, [dict(seq=3)])
    with pytest.raises(ValueError, match="sim = 'modelsim' is not one of"):
        run_layer(cfg, layer, sequences(runs), sim="modelsim")
    with pytest.raises(ValueError, match="sequence 0: seq_len = 9 is out of range"):
        run_layer(cfg, layer, [Sequence(np.zeros((9, cfg.d_model), np.int64))], sim="golden")
    with pytest.raises(ValueError, match="no sequences"):
        run_layer(cfg, layer, [], sim="golden")


@pytest.mark.cocotb
@pytest.mark.parametrize("overlapped", [False, True])
def test_icarus_engine_gives_the_same_answers(overlapped):
    """The host API over Icarus (cocotb) returns what golden and the Verilator harness do."""
    cfg = CONFIGS["tiny"]
    layer, runs = make_case(cfg, 8, [dict(seq=5, causal=True), dict(seq=3, kv=6)])
    seqs = sequences(runs)
    ica = run_layer(cfg, layer, seqs, sim="icarus", overlapped=overlapped, idle=0.2, seed=3)
    check_outputs(cfg, layer, seqs, ica, "icarus")
    ver = run_layer(cfg, layer, seqs, overlapped=overlapped)
    if not overlapped:
        # the same design: the arrays take their operands in as many cycles
        assert [a.busy_cycles for a in ica] == [b.busy_cycles for b in ver]


@pytest.mark.cocotb
def test_long_configuration_extremes():
    """configs/long.toml (the tiled path at 256 keys) through the harness: one row, the
    longest sequence (causal, with key padding: skipped tiles of both kinds), and a length
    that is a multiple of no tile; every output against golden, CYCLES against the model.
    (``python -m hw bench --what layer --config configs/long.toml --harness`` runs the
    longest plain too.)"""
    cfg = g.load_config(REPO_ROOT / "configs" / "long.toml")
    L = cfg.max_seq_len
    layer, runs = make_case(cfg, 7, [dict(seq=1), dict(seq=L, causal=True, key_len=L - 37),
                                     dict(seq=101, key_len=70)])
    seqs = sequences(runs)
    results = run_layer(cfg, layer, seqs)
    check_outputs(cfg, layer, seqs, results, "long")
    for s, res in zip(seqs, results):
        model = layer_timing(cfg, len(s.x), causal=s.causal, key_len=s.key_len)
        assert (res.cycles, res.stall_cycles) == (model.latency + TOP_CYCLES,
                                                  model.softmax_stall)
