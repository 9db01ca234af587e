"""Amaranth-simulator tests of AttentionCore built with the key/value-tiled path: whole
layers against the golden model (``attention_int`` follows ``cfg.kv_tile``) and the tiled
cycle model (hw/perf/tiled_layer.py) against CYCLES and STALL_CYCLES."""

from __future__ import annotations

import pytest

from hw.perf.layer import layer_timing
from hw.perf.tiled_layer import tile_plan
from sim.layers import make_case
from test_attention_core_unit import TINY, check_outputs, run_core


def _check_runs(cfg, layer, runs, results):
    for run, (words, err, counters) in zip(runs, results):
        assert err is None
        check_outputs(cfg, layer, run, words)
        kv = run.get("kv")
        lt = layer_timing(cfg, len(run["x"]), None if kv is None else len(kv),
                          causal=run.get("causal", False), key_len=run.get("key_len"))
        if counters is not None:
            assert (counters["cycles"], counters["stall"]) == (lt.latency, lt.softmax_stall)


@pytest.mark.parametrize("kv_tile,q_tile,engines", [(4, 4, 1), (8, 4, 2), (4, 8, 1)])
def test_tiled_layer_matches_golden_and_model(kv_tile, q_tile, engines):
    """Several tiles per row and per sequence, lengths that are not multiples of a tile,
    causal (with skipped tiles), key padding, cross-attention, a one-row sequence."""
    cfg = TINY.replace(kv_tile=kv_tile, q_tile=q_tile, engines=engines)
    layer, runs = make_case(cfg, seed=kv_tile + q_tile + engines, specs=[
        dict(seq=8), dict(seq=1), dict(seq=7, causal=True), dict(seq=6, key_len=3),
        dict(seq=3, kv=7), dict(seq=8, kv=5, key_len=2)])
    _check_runs(cfg, layer, runs, run_core(cfg, layer, runs))


def test_tiled_layer_odd_array_and_lanes():
    """A 3 x 4 array (query tiles of two row tiles), two softmax lanes, two norm lanes."""
    cfg = TINY.replace(array_rows=3, softmax_lanes=2, kv_tile=4, q_tile=6,
                       tile_norm_lanes=4)
    layer, runs = make_case(cfg, seed=5, specs=[dict(seq=8), dict(seq=5, causal=True),
                                                dict(seq=2, kv=8, key_len=7)])
    _check_runs(cfg, layer, runs, run_core(cfg, layer, runs))


@pytest.mark.parametrize("kv_tile,q_tile", [(0, 0), (4, 4)])
def test_single_buffers(kv_tile, q_tile):
    """Single input and output buffers and biases in LUT RAM, on both paths: still exact,
    and a lone sequence takes the cycles the model gives."""
    cfg = TINY.replace(kv_tile=kv_tile, q_tile=q_tile, double_buffer=False,
                       bias_in_lut_ram=True)
    layer, runs = make_case(cfg, seed=11, specs=[dict(seq=8), dict(seq=3, kv=7),
                                                 dict(seq=6, causal=True)])
    _check_runs(cfg, layer, runs, run_core(cfg, layer, runs))


def test_feed_bound_tiles():
    """Tiles whose rows the array writes faster than the softmax unit takes them (16 keys at
    one lane): the next scores job waits for the score feed, as the model says."""
    cfg = TINY.replace(max_seq_len=32, max_kv_len=32, kv_tile=16, q_tile=16)
    layer, runs = make_case(cfg, seed=13, specs=[dict(seq=16), dict(seq=32, causal=True)])
    _check_runs(cfg, layer, runs, run_core(cfg, layer, runs))


def test_short_tiles_long_passes():
    """One head of 16 dimensions, 4-row query tiles, one normalising lane: passes as long as
    the tiles' products, back-to-back E V jobs at the end."""
    cfg = TINY.replace(heads=1, head_dim=16, max_seq_len=16, max_kv_len=16, kv_tile=4,
                       q_tile=4, tile_norm_lanes=1)
    layer, runs = make_case(cfg, seed=17, specs=[dict(seq=16), dict(seq=9, causal=True)])
    _check_runs(cfg, layer, runs, run_core(cfg, layer, runs))


def test_tiled_layer_under_stalls():
    """Random idle input and output backpressure: outputs still exact."""
    cfg = TINY.replace(kv_tile=4, q_tile=4, engines=2)
    layer, runs = make_case(cfg, seed=9, specs=[dict(seq=8, causal=True), dict(seq=5, kv=6)])
    results = run_core(cfg, layer, runs, idle=0.3, backpressure=0.4, seed=3)
    for run, (words, err, _) in zip(runs, results):
        assert err is None
        check_outputs(cfg, layer, run, words)


def test_tile_plan_skips():
    """Causal mode skips key tiles above a query tile's last row; key padding those past
    key_len; the last tile of each query tile is final."""
    cfg = TINY.replace(max_seq_len=8, kv_tile=4, q_tile=4)
    plain = tile_plan(cfg, 8, 8)
    assert [(t.q0, t.k0, t.keys) for t in plain if t.group == 0] == [
        (0, 0, 4), (0, 4, 4), (4, 0, 4), (4, 4, 4)]
    causal = tile_plan(cfg, 8, 8, causal=True)
    assert [(t.q0, t.k0, t.final) for t in causal if t.group == 0] == [
        (0, 0, True), (4, 0, False), (4, 4, True)]
    padded = tile_plan(cfg, 6, 8, key_len=3)
    assert [(t.q0, t.rows, t.k0, t.keys) for t in padded if t.group == 0] == [
        (0, 4, 0, 3), (4, 2, 0, 3)]
    assert layer_timing(cfg, 8, causal=True).latency < layer_timing(cfg, 8).latency


def test_tiled_16bit_activations():
    """The key/value-tiled path with int16 activations and per-channel scales: several key
    tiles, causal, padding, cross with kv_len != seq_len; the model exact."""
    cfg = TINY.replace(act_bits=16, acc_bits=40, kv_tile=4, q_tile=4, engines=2,
                       channel_scales=True)
    _check_tiled_16(cfg, 19)


def test_tiled_16bit_probabilities():
    """prob_bits 16 on the tiled path (the final normalisation to UQ0.16)."""
    cfg = TINY.replace(prob_bits=16, recip_bits=24, exp_table_size=256, exp_frac_bits=18,
                       kv_tile=4, q_tile=4, engines=2)
    _check_tiled_16(cfg, 23)


def _check_tiled_16(cfg, seed):
    layer, runs = make_case(cfg, seed=seed, specs=[dict(seq=8), dict(seq=5, causal=True),
                                                 dict(seq=3, kv=7), dict(seq=6, key_len=3)])
    _check_runs(cfg, layer, runs, run_core(cfg, layer, runs))
