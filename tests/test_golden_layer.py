"""Properties of the golden integer layer and the float reference."""

from pathlib import Path

import numpy as np
import pytest

from golden.accuracy import LAYER_BOUNDS, layer_accuracy
from golden.attention import attention_int
from golden.config import load_config
from golden.fixed import matmul_acc, requantize
from golden.quantize import quantize_layer, quantize_tensor
from golden.reference import attention_float, random_float_layer
from golden.vectors import random_run

REPO = Path(__file__).resolve().parent.parent
TINY = load_config(REPO / "configs/tiny.toml")
DEFAULT = load_config(REPO / "configs/default.toml")


@pytest.fixture(scope="module")
def tiny_run():
    layer, x, _ = random_run(TINY, seed=4)
    return layer, x


def test_permutation_equivariance_of_self_attention(tiny_run):
    layer, x = tiny_run
    rng = np.random.default_rng(0)
    y = attention_int(TINY, layer, x)
    for _ in range(5):
        perm = rng.permutation(x.shape[0])
        np.testing.assert_array_equal(attention_int(TINY, layer, x[perm]), y[perm])


def test_causal_row_ignores_later_rows(tiny_run):
    layer, x = tiny_run
    y = attention_int(TINY, layer, x, causal=True)
    rng = np.random.default_rng(1)
    for i in range(x.shape[0]):
        x2 = x.copy()
        x2[i + 1:] = rng.integers(-128, 128, x2[i + 1:].shape)
        np.testing.assert_array_equal(attention_int(TINY, layer, x2, causal=True)[:i + 1],
                                      y[:i + 1])
        # And a prefix run gives the same rows.
        np.testing.assert_array_equal(attention_int(TINY, layer, x[:i + 1], causal=True),
                                      y[:i + 1])
    # The mask matters: without it, row 0 does depend on later rows.
    assert not np.array_equal(attention_int(TINY, layer, x)[0], y[0])


def test_key_padding_ignores_padded_rows():
    layer, x, kv = random_run(TINY, seed=5, cross=True)
    rng = np.random.default_rng(2)
    for key_len in (1, 3, 7):
        y = attention_int(TINY, layer, x, kv, key_len=key_len)
        kv2 = kv.copy()
        kv2[key_len:] = rng.integers(-128, 128, kv2[key_len:].shape)
        np.testing.assert_array_equal(attention_int(TINY, layer, x, kv2, key_len=key_len), y)
        np.testing.assert_array_equal(attention_int(TINY, layer, x, kv[:key_len]), y)
    # Self-attention padding too.
    y = attention_int(TINY, layer, x, key_len=5)
    tr = attention_int(TINY, layer, x, key_len=5, trace=True)
    assert np.all(tr.probs[:, :, 5:] == 0)
    np.testing.assert_array_equal(tr.out, y)


def test_cross_attention_with_kv_equal_x_is_self_attention(tiny_run):
    layer, x = tiny_run
    for kw in ({}, {"causal": True}, {"key_len": 4}):
        np.testing.assert_array_equal(attention_int(TINY, layer, x, x.copy(), **kw),
                                      attention_int(TINY, layer, x, **kw))


def test_run_argument_errors(tiny_run):
    layer, x = tiny_run
    with pytest.raises(ValueError, match="key_len = 0"):
        attention_int(TINY, layer, x, key_len=0)
    with pytest.raises(ValueError, match="seq_len = 9"):
        attention_int(TINY, layer, np.zeros((9, 16), np.int64))
    with pytest.raises(ValueError, match="outside -128..127"):
        attention_int(TINY, layer, x + 200)
    no_cross = TINY.replace(cross_attention=False)
    with pytest.raises(ValueError, match="cross_attention is disabled"):
        attention_int(no_cross, layer, x, x)


def independent_mha(cfg, fl, x, kv, mask):
    """Straightforward per-head, per-row loops (no shared code with golden.reference)."""
    out = np.zeros((x.shape[0], cfg.d_model))
    heads = []
    for h in range(cfg.heads):
        lo, hi = h * cfg.head_dim, (h + 1) * cfg.head_dim
        head = np.zeros((x.shape[0], cfg.head_dim))
        for i in range(x.shape[0]):
            q = fl.wq[lo:hi] @ x[i] + fl.bq[lo:hi]
            logits, values = [], []
            for j in range(kv.shape[0]):
                if mask[i, j]:
                    k = fl.wk[lo:hi] @ kv[j] + fl.bk[lo:hi]
                    logits.append(float(q @ k) / np.sqrt(cfg.head_dim))
                    values.append(fl.wv[lo:hi] @ kv[j] + fl.bv[lo:hi])
            if logits:
                w = np.exp(np.array(logits) - max(logits))
                head[i] = (w / w.sum()) @ np.array(values)
        heads.append(head)
    cat = np.concatenate(heads, axis=1)
    for i in range(x.shape[0]):
        out[i] = fl.wo @ cat[i] + fl.bo
    return out


@pytest.mark.parametrize("mode", ["plain", "causal", "padding", "cross"])
def test_float_reference_matches_independent_implementation(mode):
    cfg = TINY
    rng = np.random.default_rng(7)
    fl = random_float_layer(cfg, rng, bias_scale=0.3)
    x = rng.normal(size=(6, cfg.d_model)) * 2
    kv = rng.normal(size=(8, cfg.d_model)) * 2 if mode == "cross" else None
    kw = {"causal": True} if mode == "causal" else {"key_len": 3} if mode == "padding" else {}
    keys = x if kv is None else kv
    mask = np.zeros((6, keys.shape[0]), bool)
    for i in range(6):
        for j in range(keys.shape[0]):
            mask[i, j] = (j <= i if mode == "causal" else True) and (
                j < 3 if mode == "padding" else True)
    np.testing.assert_allclose(attention_float(cfg, fl, x, kv, **kw),
                               independent_mha(cfg, fl, x, keys, mask), rtol=1e-12, atol=1e-12)


def test_float_row_without_valid_key_gives_output_bias():
    # A query row with no valid key attends to nothing, as in hardware: its attention output
    # is 0 and the layer output is the output bias (torch would give NaN).
    cfg = TINY
    rng = np.random.default_rng(8)
    fl = random_float_layer(cfg, rng)
    x = rng.normal(size=(3, cfg.d_model))
    out, mid = attention_float(cfg, fl, x, key_len=0, return_intermediates=True)
    assert np.all(mid["attn"] == 0)
    np.testing.assert_array_equal(out, np.broadcast_to(fl.bo, out.shape))


def test_quantize_layer_calibrates_sequences_separately():
    cfg = DEFAULT
    rng = np.random.default_rng(9)
    fl = random_float_layer(cfg, rng)
    seqs = rng.normal(size=(4, 64, cfg.d_model))
    per_seq = quantize_layer(cfg, fl, seqs)
    attn_max = max(np.abs(attention_float(cfg, fl, s, return_intermediates=True)[1]["attn"])
                   .max() for s in seqs)
    assert per_seq.scales["attn"] == pytest.approx(attn_max / 127)
    # 2-D input is one sequence.
    one = quantize_layer(cfg, fl, seqs[0])
    ref = np.abs(attention_float(cfg, fl, seqs[0], return_intermediates=True)[1]["attn"]).max()
    assert one.scales["attn"] == pytest.approx(ref / 127)
    with pytest.raises(ValueError, match="calib_x has 4 sequences and calib_kv 2"):
        quantize_layer(cfg, fl, seqs, seqs[:2])


def test_quantize_layer_takes_sequences_of_any_lengths():
    cfg = DEFAULT
    rng = np.random.default_rng(10)
    fl = random_float_layer(cfg, rng)
    seqs = [rng.normal(size=(n, cfg.d_model)) for n in (3, 64, 17)]
    q = quantize_layer(cfg, fl, seqs)
    outs = [attention_float(cfg, fl, s, return_intermediates=True) for s in seqs]
    assert q.scales["attn"] == pytest.approx(max(np.abs(o[1]["attn"]).max() for o in outs) / 127)
    assert q.scales["out"] == pytest.approx(max(np.abs(o[0]).max() for o in outs) / 127)
    assert q.scales["x"] == pytest.approx(max(np.abs(s).max() for s in seqs) / 127)
    # Cross-attention: one kv sequence of its own length per x sequence.
    kvs = [rng.normal(size=(n, cfg.d_model)) for n in (5, 1, 40)]
    qc = quantize_layer(cfg, fl, seqs, kvs, key_len=[5, 1, 20])
    assert qc.scales["kv"] == pytest.approx(max(np.abs(k).max() for k in kvs) / 127)
    with pytest.raises(ValueError, match=r"calib_x sequence 1 has shape \(64, 5\): expected "
                                         r"\(rows, 128\)"):
        quantize_layer(cfg, fl, [seqs[0], seqs[1][:, :5]])


def test_percentile_estimator_clips_outliers():
    cfg = DEFAULT
    rng = np.random.default_rng(11)
    fl = random_float_layer(cfg, rng)
    x = rng.normal(size=(64, cfg.d_model))
    x[3, 7] = 40.0
    q_max = quantize_layer(cfg, fl, x)
    q_pct = quantize_layer(cfg, fl, x, estimator="percentile", percentile=99.9)
    assert q_max.scales["x"] == pytest.approx(40.0 / 127)
    assert q_pct.scales["x"] == pytest.approx(np.percentile(np.abs(x), 99.9) / 127)
    assert q_pct.scales["x"] < q_max.scales["x"] / 5
    # Weights keep their maximum.
    assert q_pct.scales["wq"] == q_max.scales["wq"]
    with pytest.raises(ValueError, match="estimator = 'mean' is not one of max, percentile"):
        quantize_layer(cfg, fl, x, estimator="mean")
    with pytest.raises(ValueError, match=r"percentile = 20 is out of range: allowed 50\.\.100"):
        quantize_layer(cfg, fl, x, estimator="percentile", percentile=20)


@pytest.mark.parametrize("cfg, seqs, calib", [(TINY, 16, 64), (DEFAULT, 4, 32)],
                         ids=["tiny", "default"])
def test_quantized_layer_within_documented_bound(cfg, seqs, calib):
    r = layer_accuracy(cfg, seed=3, sequences=seqs, calib_sequences=calib)
    b = LAYER_BOUNDS[cfg.name]
    assert r["layer_cosine_min"] >= b["cosine_min"], r["modes"]
    assert r["layer_rel_err"] <= b["rel_err_max"], r["modes"]
    assert r["layer_saturated_pct"] <= b["saturated_pct_max"], r["modes"]


def test_per_channel_weight_scales():
    from golden.fixed import ChannelRequant
    cfg = DEFAULT
    rng = np.random.default_rng(12)
    fl = random_float_layer(cfg, rng)
    # One output channel of Wq much larger than the rest: per-tensor it takes the whole range.
    fl.wq[5] *= 20
    x = rng.normal(size=(32, cfg.d_model))
    qt = quantize_layer(cfg, fl, x)
    qc = quantize_layer(cfg, fl, x, weight_scales="channel")
    assert qc.per_channel and not qt.per_channel
    assert isinstance(qc.rq_q, ChannelRequant) and qc.rq_q.mult.shape == (cfg.d_model,)
    assert not isinstance(qc.rq_pv, ChannelRequant)
    assert qc.scales["wq"][3] == pytest.approx(np.abs(fl.wq[3]).max() / 127)
    # Every row uses the int8 range; per-tensor, the small rows use a twentieth of it.
    assert np.abs(qc.wq).max(axis=1).min() == 127
    assert np.abs(qt.wq[3]).max() < 15
    # Each channel's real multiplier is s_x * s_wq[c] / s_q.
    np.testing.assert_allclose(qc.rq_q.real, qc.scales["x"] * qc.scales["wq"] / qc.scales["q"],
                               rtol=2 ** -15)
    # The projection's accumulator, at its per-channel scale, is far closer to float (the
    # small rows keep their precision), and so is the requantized Q.
    q_float = x @ fl.wq.T + fl.bq
    acc_err, q_err = [], []
    for ql in (qt, qc):
        xq = quantize_tensor(x, ql.scales["x"], 8)
        acc = matmul_acc(xq, ql.wq.T, ql.bq)
        acc_err.append(np.abs(acc * ql.scales["x"] * ql.scales["wq"] - q_float).mean())
        q_err.append(np.abs(requantize(acc, ql.rq_q) * ql.scales["q"] - q_float).mean())
    assert acc_err[1] < acc_err[0] / 4
    assert q_err[1] < q_err[0]
    with pytest.raises(ValueError, match="weight_scales = 'row' is not one of tensor, channel"):
        quantize_layer(cfg, fl, x, weight_scales="row")


def test_per_channel_layer_is_refused_by_the_register_map():
    from hw.bus.regmap import build_regmap, param_values
    cfg = TINY
    rng = np.random.default_rng(13)
    q = quantize_layer(cfg, random_float_layer(cfg, rng), rng.normal(size=(8, 16)),
                       weight_scales="channel")
    with pytest.raises(ValueError, match="one multiplier and shift per projection"):
        param_values(build_regmap(cfg), q)


def test_per_channel_zero_row_keeps_its_bias():
    cfg = DEFAULT
    rng = np.random.default_rng(14)
    fl = random_float_layer(cfg, rng)
    fl.wq[3] = 0.0
    fl.bq[3] = 0.5
    x = rng.normal(size=(16, cfg.d_model))
    qc = quantize_layer(cfg, fl, x, weight_scales="channel")
    # The zero row's scale is floored at 2**-8 of the tensor's: its bias stays representable.
    assert qc.scales["wq"][3] == pytest.approx(np.abs(fl.wq).max() / 127 * 2 ** -8)
    acc = matmul_acc(quantize_tensor(x, qc.scales["x"], 8), qc.wq.T, qc.bq)
    q3 = requantize(acc, qc.rq_q)[:, 3] * qc.scales["q"]
    assert np.abs(q3 - 0.5).max() < qc.scales["q"]


def test_channel_requant_and_shift_ranges_are_checked():
    from golden.fixed import ChannelRequant, round_shift
    with pytest.raises(ValueError, match=r"ChannelRequant.shift\[1\] = 63 is out of range: "
                                         r"allowed 1..62"):
        ChannelRequant(np.array([3, 4]), np.array([2, 63]))
    with pytest.raises(ValueError, match="equal-length integer vectors"):
        ChannelRequant(np.array([3, 4]), np.array([2]))
    with pytest.raises(ValueError, match="round_shift by 64 is out of range: allowed <= 63"):
        round_shift(np.array([5]), np.array([64]))


def test_additive_layer_is_refused_by_the_register_map():
    from hw.bus.regmap import build_regmap, param_values
    cfg = TINY
    rng = np.random.default_rng(15)
    q = quantize_layer(cfg, random_float_layer(cfg, rng, additive=True),
                       rng.normal(size=(8, 16)), scoring="additive")
    assert set(q.arrays()) >= {"wa", "tanh_mult", "tanh_shift"}
    with pytest.raises(ValueError, match="additive scoring; the configuration builds no "
                                         "additive scorer"):
        param_values(build_regmap(cfg), q)
    # With a scorer the layer's TANH_* parameters are register values.
    values = param_values(build_regmap(cfg.replace(additive_lanes=4)), q)
    assert (values["TANH_MULT"], values["TANH_SHIFT"]) == (q.tanh_mult, q.tanh_shift)
