"""Edge cases of the golden fixed-point softmax (golden/softmax.py)."""

import copy
from pathlib import Path

import numpy as np
import pytest

from golden.config import load_config
from golden.fixed import Requant
from golden.reference import softmax_float
from golden.softmax import attention_mask, exp_table, softmax_exp, softmax_int

REPO = Path(__file__).resolve().parent.parent
TINY = load_config(REPO / "configs/tiny.toml")
DEFAULT = load_config(REPO / "configs/default.toml")
BERT = load_config(REPO / "configs/bert-base.toml")
# A realistic multiplier (what quantize_layer calibrates for random layers) and the largest.
REAL = Requant.from_real(0.32, 16)
HUGE = Requant((1 << 16) - 1, 1)


def smax(cfg):
    return cfg.head_dim * 2 ** (2 * cfg.act_bits - 2)


def probs(cfg, s, rq=REAL, valid=None, **kw):
    return softmax_int(np.asarray(s), cfg, rq.mult, rq.shift, valid, **kw)


@pytest.mark.parametrize("cfg", [TINY, DEFAULT], ids=lambda c: c.name)
def test_length_one_saturates_at_one(cfg):
    # p = 1.0 is not representable in UQ0.8: it saturates to 255/256.
    for s in (0, smax(cfg), -smax(cfg)):
        assert probs(cfg, [[s]]).tolist() == [[2 ** cfg.prob_bits - 1]]


@pytest.mark.parametrize("cfg", [TINY, DEFAULT, BERT], ids=lambda c: c.name)
def test_all_equal_rows_are_correctly_rounded(cfg):
    B = cfg.prob_bits
    for n in range(1, cfg.max_kv_len + 1):
        row = np.full((1, n), -1234)
        want = min((2 ** (B + 1) // n + 1) // 2, 2 ** B - 1)     # round half up of 2^B / n
        np.testing.assert_array_equal(probs(cfg, row), want, err_msg=f"n = {n}")


def test_one_dominant_score_takes_everything():
    for cfg in (TINY, DEFAULT):
        s = np.full((1, cfg.max_kv_len), -smax(cfg))
        s[0, 3] = smax(cfg)
        p = probs(cfg, s, HUGE)
        want = np.zeros_like(p)
        want[0, 3] = 2 ** cfg.prob_bits - 1
        np.testing.assert_array_equal(p, want)


def test_most_negative_scores_and_extreme_multipliers_stay_exact():
    # max - score reaches 2 * smax = 2^(score_bits - 1); with the largest multiplier the
    # exponent saturates (E = 0), with the smallest it barely moves.
    for cfg in (TINY, DEFAULT, BERT):
        s = np.array([[smax(cfg), -smax(cfg), -smax(cfg) + 1]])
        assert probs(cfg, s, HUGE).tolist() == [[255, 0, 0]]
        tiny_rq = Requant.from_real(2.0 ** -30, 16)
        np.testing.assert_array_equal(probs(cfg, s, tiny_rq), [[85, 85, 85]])
        d = np.array([0, 2 * smax(cfg)])
        assert softmax_exp(d, cfg, HUGE.mult, HUGE.shift).tolist() == [2 ** cfg.exp_bits, 0]


def test_masked_scores_give_exactly_zero_whatever_their_value():
    cfg = DEFAULT
    rng = np.random.default_rng(5)
    key_len = cfg.max_kv_len * 3 // 4      # padded keys as well as causally masked ones
    s = rng.integers(-5000, 5000, (64, cfg.max_kv_len))
    valid = attention_mask(64, cfg.max_kv_len, causal=True, key_len=key_len)
    # Masked scores larger than every valid one must not move the row max.
    s_big = np.where(valid, s, smax(cfg))
    p = probs(cfg, s, valid=valid)
    assert np.all(p[~valid] == 0)
    np.testing.assert_array_equal(probs(cfg, s_big, valid=valid), p)
    # Equal to the softmax of the valid prefix alone.
    for i in (0, 7, 63):
        n = min(i + 1, key_len)
        np.testing.assert_array_equal(p[i, :n], probs(cfg, s[i:i + 1, :n])[0])


def test_empty_rows_are_zero():
    cfg = TINY
    s = np.arange(16).reshape(2, 8)
    valid = np.zeros((2, 8), bool)
    valid[1, 2] = True
    p = probs(cfg, s, valid=valid)
    assert p[0].tolist() == [0] * 8
    assert p[1].tolist() == [0, 0, 255, 0, 0, 0, 0, 0]
    assert probs(cfg, np.zeros((3, 0), np.int64)).shape == (3, 0)


@pytest.mark.parametrize("cfg", [TINY, DEFAULT, BERT], ids=lambda c: c.name)
def test_row_sums_within_documented_bound(cfg):
    # docs/numerics.md: |sum(P) - 2^B| <= len/2 + 1 (each output within 0.53 LSB of a value
    # summing to 2^B, errors partly cancelling; +1 for the saturation at 255).
    rng = np.random.default_rng(11)
    rows = 3000 if cfg is not BERT else 400
    lens = rng.integers(1, cfg.max_kv_len + 1, rows)
    valid = np.arange(cfg.max_kv_len)[None, :] < lens[:, None]
    spread = np.exp(rng.uniform(0, 11, (rows, 1)))
    s = np.clip(rng.normal(size=valid.shape) * spread, -smax(cfg), smax(cfg)).astype(np.int64)
    total = probs(cfg, s, valid=valid).sum(axis=1)
    dev = np.abs(total - 2 ** cfg.prob_bits)
    assert np.all(dev <= lens / 2 + 1)
    # Short rows are far tighter: the error per row is well below the per-output bound.
    short = lens <= 8
    assert dev[short].max() <= 3


@pytest.mark.parametrize("cfg", [TINY, DEFAULT, BERT], ids=lambda c: c.name)
def test_accumulator_extremes_fit_their_widths(cfg):
    # Full-length row of equal scores: the largest possible row sum, N * 2^W.
    s = np.zeros((1, cfg.max_kv_len), np.int64)
    p, tr = probs(cfg, s, trace=True)
    assert tr.exps.max() == 2 ** cfg.exp_bits
    assert tr.total[0] == cfg.max_kv_len * 2 ** cfg.exp_bits < 2 ** cfg.sum_bits
    assert 2 ** (cfg.recip_bits - 1) < tr.recip[0] <= 2 ** cfg.recip_bits
    # The widest product E * recip stays below 2^62 (int64 and the hardware multiplier).
    assert int(tr.exps.max()) * int(tr.recip.max()) < 2 ** 62
    # A single key: sum is 2^W exactly, recip 2^R.
    _, tr1 = probs(cfg, s[:, :1], trace=True)
    assert tr1.total[0] == 2 ** cfg.exp_bits and tr1.recip[0] == 2 ** cfg.recip_bits


def _beyond_hardware(cfg, **fields):
    """``cfg`` with fields the hardware does not support yet (the configuration refuses them)
    but the golden model's arithmetic is written for: a copy set without validation."""
    c = copy.copy(cfg)
    for k, v in fields.items():
        object.__setattr__(c, k, v)
    return c


def test_exp_table_endpoints_and_monotonic():
    for cfg in (TINY, _beyond_hardware(TINY, prob_bits=16)):
        t = exp_table(cfg)
        T = cfg.exp_table_bits
        assert len(t) == cfg.exp_table_size + 1
        assert t[0] == 2 ** T and t[-1] == 2 ** (T - 1)
        assert np.all(np.diff(t) < 0)


def test_softmax_exp_rejects_negative_difference():
    with pytest.raises(ValueError, match="max - score >= 0"):
        softmax_exp(np.array([-1]), TINY, REAL.mult, REAL.shift)


def test_close_to_float_on_random_rows():
    # A quick sanity bound here; golden/accuracy.py measures it over >= 10,000 rows.
    cfg = DEFAULT
    rng = np.random.default_rng(2)
    s = rng.integers(-3000, 3000, (200, cfg.max_kv_len))
    c = REAL.real / 2 ** cfg.exp_frac_bits * np.log(2)
    err = probs(cfg, s) - softmax_float(s * c) * 2 ** cfg.prob_bits
    assert np.abs(err).max() <= 0.55
