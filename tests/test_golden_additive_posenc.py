"""Additive scoring (golden/additive.py) and positional encodings (golden/posenc.py) in the
golden model and the float reference."""

import math
from pathlib import Path

import numpy as np
import pytest

from golden.additive import (TANH_ARG_FRAC, TANH_ARG_MAX, TANH_BITS, additive_scores,
                             tanh_arg, tanh_int)
from golden.attention import attention_int
from golden.config import load_config
from golden.posenc import PE_BITS, add_encoding, encoding_float, encoding_int
from golden.quantize import dequantize, quantize_layer, quantize_tensor
from golden.reference import attention_float, random_float_layer

REPO = Path(__file__).resolve().parent.parent
TINY = load_config(REPO / "configs/tiny.toml")
DEFAULT = load_config(REPO / "configs/default.toml")


def test_tanh_within_one_lsb_over_every_argument_code():
    lim = TANH_ARG_MAX << TANH_ARG_FRAC
    a = np.arange(-lim - 300, lim + 300)
    t = tanh_int(a)
    top = (1 << TANH_BITS) - 1
    ref = np.tanh(a / 2.0 ** TANH_ARG_FRAC) * 2 ** TANH_BITS
    err = np.abs(t - np.clip(ref, -top, top))
    assert err.max() <= 0.65                       # measured 0.639 (docs/numerics.md)
    assert np.mean(t == np.clip(np.floor(ref + 0.5), -top, top)) >= 0.98
    assert np.array_equal(tanh_int(-a), -t)       # odd
    assert t.max() == top and tanh_int([0])[0] == 0


def test_additive_scores_follow_the_formula():
    rng = np.random.default_rng(0)
    q = rng.integers(-128, 128, (5, 8))
    k = rng.integers(-128, 128, (7, 8))
    w = rng.integers(-128, 128, 8)
    mult, shift = 40_000, 17                       # s_qk 2**10 = 40000 / 2**17
    s = additive_scores(q, k, w, mult, shift)
    want = np.array([[sum(int(w[d]) * int(tanh_int(tanh_arg(q[i, d] + k[j, d], mult, shift)))
                          for d in range(8)) for j in range(7)] for i in range(5)])
    assert np.array_equal(s, want)
    real = np.tanh((q[:, None, :] + k[None, :, :]) * mult * 2.0 ** -shift / 2 ** 10) @ w
    assert np.abs(s / 2 ** TANH_BITS - real).max() < 8 * 128 * 0.7 / 2 ** TANH_BITS
    with pytest.raises(ValueError, match="must share d_k"):
        additive_scores(q, k, w[:4], mult, shift)


def test_encodings_are_the_published_formulas():
    p = encoding_float(6, 8, "1d", offset=3)
    for i in range(6):
        for j in range(4):
            ang = (i + 3) / 10000 ** (2 * j / 8)
            assert p[i, 2 * j] == pytest.approx(math.sin(ang))
            assert p[i, 2 * j + 1] == pytest.approx(math.cos(ang))
    two = encoding_float(12, 8, "2d", grid_width=4)
    rows, cols = np.arange(12) // 4, np.arange(12) % 4
    assert np.allclose(two[:, :4], encoding_float(3, 4, "1d")[rows])
    assert np.allclose(two[:, 4:], encoding_float(4, 4, "1d")[cols])
    assert not encoding_float(3, 8, "off").any()
    assert np.array_equal(encoding_int(5, 8), np.floor(encoding_float(5, 8) * 2 ** PE_BITS + 0.5))
    with pytest.raises(ValueError, match="grid width >= 1"):
        encoding_float(4, 8, "2d", grid_width=0)
    with pytest.raises(ValueError, match="d = 6 must be even .a multiple of 4"):
        encoding_float(4, 6, "2d", grid_width=2)
    with pytest.raises(ValueError, match="mode = '3d' is not one of off, 1d, 2d"):
        encoding_float(4, 8, "3d")


def test_adding_the_encoding_saturates_at_the_input_range():
    x = np.array([[120, -120, 0, 5]])
    codes = np.array([[1 << PE_BITS, -(1 << PE_BITS), 1 << PE_BITS, 0]])
    # One encoding unit is 20 input LSB: 2**-14 / s_x with s_x = 1/20.
    out = add_encoding(x, codes, 20, PE_BITS)
    assert out.tolist() == [[127, -128, 20, 5]]


def _layer_cosines(cfg, qkw, run_kw, float_kw, seqs=4, seed=1):
    rng = np.random.default_rng(seed)
    fl = random_float_layer(cfg, rng, additive=True)
    n = cfg.max_seq_len
    q = quantize_layer(cfg, fl, rng.normal(size=(16, n, cfg.d_model)), **qkw)
    cos = []
    for _ in range(seqs):
        x = rng.normal(size=(n, cfg.d_model))
        y = dequantize(attention_int(cfg, q, quantize_tensor(x, q.scales["x"], 8), **run_kw),
                       q.scales["out"])
        ref = attention_float(cfg, fl, x, **float_kw(n))
        cos.append((y * ref).sum(1) / np.linalg.norm(y, axis=1) / np.linalg.norm(ref, axis=1))
    return np.concatenate(cos), q


@pytest.mark.parametrize("cfg", [TINY, DEFAULT], ids=["tiny", "default"])
def test_additive_layer_against_float(cfg):
    cos, q = _layer_cosines(cfg, {"scoring": "additive"}, {},
                            lambda n: {"scoring": "additive"})
    assert q.scoring == "additive" and q.scales["q"] == q.scales["k"]
    assert q.wa.shape == (cfg.heads, cfg.head_dim) and np.abs(q.wa).max() == 127
    assert cos.min() > 0.99


@pytest.mark.parametrize("mode,grid", [("1d", None), ("2d", 2)])
def test_positional_encoding_layer_against_float(mode, grid):
    cfg = DEFAULT
    cos, q = _layer_cosines(cfg, {"pos_enc": (mode, grid)},
                            {"pos_enc": mode, "grid_width": grid},
                            lambda n: {"pos_enc": encoding_float(n, cfg.d_model, mode, 0, grid)})
    assert q.pe_mult > 0
    assert cos.min() > 0.99


def test_encoding_in_the_layer_is_the_encoding_added_to_its_input():
    cfg = TINY
    rng = np.random.default_rng(2)
    fl = random_float_layer(cfg, rng)
    q = quantize_layer(cfg, fl, rng.normal(size=(8, 8, 16)), pos_enc=("1d", None))
    x = rng.integers(-128, 128, (6, 16))
    xp = add_encoding(x, encoding_int(6, 16, "1d", 2), q.pe_mult, q.pe_shift)
    assert np.array_equal(attention_int(cfg, q, x, pos_enc="1d", pe_offset=2),
                          attention_int(cfg, q, xp))
    plain = quantize_layer(cfg, fl, rng.normal(size=(8, 8, 16)))
    with pytest.raises(ValueError, match="quantized without one"):
        attention_int(cfg, plain, x, pos_enc="1d")
