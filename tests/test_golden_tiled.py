"""The key/value-tiled attention path (golden/online_softmax.py): hand-computed cases, the
invariances the method promises, widths at the extremes, and its accuracy target."""

from pathlib import Path

import numpy as np
import pytest

from golden.accuracy import layer_accuracy, LAYER_BOUNDS
from golden.config import load_config
from golden.fixed import Requant
from golden.online_softmax import (TILE_PROB_BITS, attend_rows, attend_tiled, score_log2,
                                   tiled_format)
from golden.tiled_accuracy import TILED_TARGETS, tiled_accuracy

REPO = Path(__file__).resolve().parent.parent
DEFAULT = load_config(REPO / "configs/default.toml")
TINY = load_config(REPO / "configs/tiny.toml")
F = DEFAULT.exp_frac_bits
B = DEFAULT.prob_bits
# exp_mult * 2**-exp_shift = 1: a score is its own base-2 argument (units of 2**-F).
UNIT = (1 << 15, 15)
# rq.real = 2**-B: A is the attention output in value units, rounded.
RQ_UNIT = Requant(1 << 15, 15 + B)


def run(scores, v, valid=None, tile=1, cfg=DEFAULT, mult=UNIT, rq=RQ_UNIT):
    scores = np.atleast_2d(np.asarray(scores, dtype=np.int64))
    v = np.asarray(v, dtype=np.int64).reshape(scores.shape[1], -1)
    valid = np.ones(scores.shape, dtype=bool) if valid is None else valid
    return attend_tiled(cfg, scores, v, valid, *mult, rq,
                        tiled_format(cfg, tile, max_kv_len=scores.shape[1]), trace=True)


def test_two_keys_one_octave_apart_by_hand():
    # y = (0, -1 octave): E = (2**16, 2**15), so A = (2 v0 + v1) / 3.
    for tile in (1, 2):
        out, tr = run([[0, -(1 << F)]], [[90], [-30]], tile=tile)
        assert tr.row_max[0] == 0
        assert tr.row_sum[0] == (1 << 16) + (1 << 15)
        assert tr.out_acc[0, 0] == 90 * (1 << 16) - 30 * (1 << 15)
        assert out[0, 0] == 50


def test_rising_maximum_rescales_by_a_shift():
    # Keys in ascending order, one per tile: the maximum rises one octave at the second key,
    # halving the running sum and accumulator exactly; the result equals the other order's.
    out, tr = run([[-(1 << F), 0]], [[-30], [90]], tile=1)
    assert tr.rescales[0] == 1
    assert tr.row_max[0] == 0
    assert tr.row_sum[0] == (1 << 16) + (1 << 15)
    assert out[0, 0] == 50


def test_maximum_is_the_ceiling_octave():
    # y = 0.25 octave: M = 1, so the largest E is 2**-0.75 of 2**16, not 2**16.
    _, tr = run([[1 << (F - 2)]], [[1]])
    assert tr.row_max[0] == 1
    assert tr.row_sum[0] == round(2 ** (16 - 0.75))


def test_tile_size_does_not_matter_without_a_rescale():
    # The row maximum in the first tile: M never rises, so every tile size adds the same
    # integers in a different grouping and the results are identical.
    rng = np.random.default_rng(3)
    scores = np.sort(rng.integers(-40_000, 40_000, (1, 200)), axis=1)[:, ::-1]
    v = rng.integers(-128, 128, (200, 8))
    mult = (23_000, 24)
    base, tr = run(scores, v, tile=200, mult=mult)
    for tile in (1, 7, 16, 64):
        out, t = run(scores, v, tile=tile, mult=mult)
        assert t.rescales[0] == 0
        assert np.array_equal(out, base) and np.array_equal(t.out_acc, tr.out_acc)


def test_masked_keys_take_no_part_and_empty_rows_are_zero():
    rng = np.random.default_rng(4)
    scores = rng.integers(-5000, 5000, (6, 40))
    v = rng.integers(-128, 128, (40, 4))
    valid = rng.random((6, 40)) < 0.5
    valid[2] = False
    out, _ = run(scores, v, valid, tile=8)
    scores2 = np.where(valid, scores, rng.integers(-50_000, 50_000, scores.shape))
    v2 = v.copy()
    v2[~valid.any(axis=0)] = 77
    out2, _ = run(scores2, v2, valid, tile=8)
    assert np.array_equal(out, out2)
    assert not out[2].any()


def test_a_rise_beyond_the_width_empties_the_running_values():
    # The second key is 100 octaves above the first: the first key's share vanishes.
    out, tr = run([[0, 100 << F]], [[-128], [127]], tile=1)
    assert tr.rescales[0] == 1 and out[0, 0] == 127


@pytest.mark.parametrize("value", [-128, 127])
def test_longest_rows_at_the_extremes_are_exact(value):
    # 4096 equal keys of the most extreme value: O = value * l must normalise back exactly.
    cfg = DEFAULT.replace(max_seq_len=4096, max_kv_len=4096)
    n = 4096
    scores = np.full((2, n), 64 * 2 ** 14, dtype=np.int64)
    v = np.full((n, 1), value, dtype=np.int64)
    rq = Requant.from_real(1.0 / 2 ** B, cfg.requant_mult_bits)
    for tile in (16, 256):
        out, tr = run(scores, v, tile=tile, cfg=cfg, mult=(40_000, 20), rq=rq)
        fmt = tiled_format(cfg, tile)
        assert int(tr.row_sum.max()).bit_length() <= fmt.sum_bits
        assert int(np.abs(tr.out_acc).max()).bit_length() + 1 <= fmt.out_acc_bits
        assert (out == value).all()


def test_score_log2_rounds_half_up():
    assert list(score_log2([-3, -1, 1, 3], 1, 1)) == [-1, 0, 1, 2]


def test_format_errors_name_the_limit():
    with pytest.raises(ValueError, match=r"kv_tile = 0 is out of range: allowed 1\.\.64"):
        tiled_format(DEFAULT, 0)
    with pytest.raises(ValueError, match=r"kv_tile = 65 is out of range: allowed 1\.\.64"):
        tiled_format(DEFAULT, 65)
    big = DEFAULT.replace(max_seq_len=512, max_kv_len=512)
    with pytest.raises(ValueError, match=r"kv_tile = 512 is too large for acc_bits = 32.*"
                                         r"allowed kv_tile <= 256"):
        tiled_format(big, 512)
    fmt = tiled_format(big, 256)
    assert fmt.prob_bits == TILE_PROB_BITS and fmt.operand_bits == 18 and fmt.tiles == 2


def test_attention_output_within_one_lsb():
    # The target on a reduced study (make accuracy runs L up to 4096); the
    # whole-row path on the same inputs misses it by far (its P is rounded to 8 bits).
    rep = tiled_accuracy(DEFAULT, [48, 300], [16, 64], seed=11, rows=64)
    for L, per_tile in rep.items():
        for tile in ("16", "64"):
            assert per_tile[tile]["within_1_lsb_pct"] >= TILED_TARGETS["within_1_lsb_pct"]
            assert per_tile[tile]["max_err_lsb"] < 1.5
        assert per_tile["rows"]["within_1_lsb_pct"] < 99.0


def test_whole_row_comparison_is_attention_int_per_head():
    rng = np.random.default_rng(5)
    s = rng.integers(-3000, 3000, (8, 8))
    v = rng.integers(-128, 128, (8, 8))
    from golden.softmax import softmax_int
    from golden.fixed import requantize
    p = softmax_int(s, TINY, 20_000, 20)
    assert np.array_equal(attend_rows(TINY, s, v, np.ones_like(s, bool), 20_000, 20, RQ_UNIT),
                          requantize(p @ v, RQ_UNIT))


def test_tiled_layer_within_the_documented_bound():
    r = layer_accuracy(TINY, seed=3, sequences=8, calib_sequences=32, kv_tile=4)
    b = LAYER_BOUNDS["tiny"]
    assert r["layer_cosine_min"] >= b["cosine_min"]
    assert r["layer_rel_err"] <= b["rel_err_max"]
