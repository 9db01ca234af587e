"""Post-training quantization: float layer + calibration data in, :class:`QuantizedLayer` out.

Per-tensor symmetric scales (zero point 0): ``s = peak / (2**(bits-1) - 1)``, with ``peak``
the largest ``|t|`` (or a percentile of the magnitudes, for activations) of the float
reference run on the calibration activations. Biases are quantized to the
accumulator's scale ``s_in * s_w``. Every real multiplier becomes a :class:`Requant`.
"""

from __future__ import annotations

import math

import numpy as np

from .attention import QuantizedLayer
from .config import AttentionConfig
from .additive import TANH_ARG_FRAC, TANH_BITS
from .fixed import ChannelRequant, Requant
from .posenc import PE_BITS, encoding_float
from .reference import FloatLayer, attention_float

__all__ = ["RANGE_ESTIMATORS", "WEIGHT_SCALES", "quantize_tensor", "symmetric_scale", "quantize_layer",
           "dequantize"]


# Range estimators of activation scales: "max" (the largest magnitude seen in calibration) or
# "percentile" (that percentile of the magnitudes: outliers beyond it clip, the rest get
# finer steps). Weights always use the maximum.
RANGE_ESTIMATORS = ("max", "percentile")
WEIGHT_SCALES = ("tensor", "channel")
DEFAULT_PERCENTILE = 99.99


def symmetric_scale(t, bits: int, percentile: float | None = None) -> float:
    """``peak / (2**(bits-1) - 1)``, ``peak`` the largest ``|t|`` or its ``percentile``."""
    a = np.abs(np.asarray(t, dtype=np.float64))
    if not a.size:
        peak = 0.0
    elif percentile is None:
        peak = float(a.max())
    else:
        peak = float(np.percentile(a, percentile))
    return max(peak, 1e-12) / ((1 << (bits - 1)) - 1)


def quantize_tensor(t, scale: float, bits: int) -> np.ndarray:
    """``clamp(floor(t / scale + 1/2))``: float to signed ``bits`` integers (round half up)."""
    lim = 1 << (bits - 1)
    return np.clip(np.floor(np.asarray(t, dtype=np.float64) / scale + 0.5),
                   -lim, lim - 1).astype(np.int64)


def dequantize(t, scale: float) -> np.ndarray:
    return np.asarray(t, dtype=np.float64) * scale


def _sequences(calib, d_model: int, name: str) -> list[np.ndarray]:
    """One (rows, d_model) array, a (sequences, rows, d_model) array, or a list of
    (rows_i, d_model) arrays of any lengths, as a list of float64 sequences."""
    if isinstance(calib, (list, tuple)):
        seqs = [np.asarray(a, dtype=np.float64) for a in calib]
    else:
        a = np.asarray(calib, dtype=np.float64)
        seqs = [a] if a.ndim == 2 else list(a) if a.ndim == 3 else [a]
    if not seqs:
        raise ValueError(f"{name}: no calibration sequence given")
    for i, a in enumerate(seqs):
        if a.ndim != 2 or a.shape[1] != d_model or not a.shape[0]:
            raise ValueError(f"{name} sequence {i} has shape {a.shape}: expected (rows, "
                             f"{d_model}) with rows >= 1")
    return seqs


def quantize_layer(cfg: AttentionConfig, layer: FloatLayer, calib_x, calib_kv=None, *,
                   causal: bool = False, key_len=None, estimator: str = "max",
                   percentile: float = DEFAULT_PERCENTILE,
                   weight_scales: str = "tensor", scoring: str = "dot",
                   pos_enc: tuple | None = None) -> QuantizedLayer:
    """Quantize ``layer`` for ``cfg`` using calibration activations ``calib_x`` and, for
    cross-attention, ``calib_kv``.

    ``calib_x`` is one sequence (seq_len, d_model), several of one length (sequences, seq_len,
    d_model), or a list of sequences of any lengths; ``calib_kv`` likewise, with the same
    number of sequences. Each sequence runs through the float reference on its own (stacking
    sequences into one would let every row attend over all of them and shrink the attention
    output's range), with the mask the layer will run with: ``causal``, and ``key_len`` (an
    int, or one per sequence) for key padding. The intermediate scales come from all
    sequences together, by ``estimator``: ``"max"`` or ``"percentile"`` (of the magnitudes,
    ``percentile`` per cent); ``scales`` in the result records all of them.

    ``weight_scales`` is ``"tensor"`` (one scale per weight matrix) or ``"channel"`` (one per
    output channel, i.e. per row of the ``(out, in)`` matrix: each projection then
    requantizes with a :class:`ChannelRequant`; the hardware's scale table, built with
    ``channel_scales``).

    ``scoring="additive"`` quantizes for additive scores (``layer.wa`` needed): Q and K share
    the larger of their scales, so ``q + k`` is exact, and the tanh argument and the score's
    exponent multiplier follow (golden/additive.py). ``pos_enc`` (``("1d", None)`` or
    ``("2d", grid_width)``) calibrates with the positional encoding added to every
    calibration sequence from position 0: ``s_x`` then covers ``x + p``, and ``pe_mult`` /
    ``pe_shift`` bring the encoding's codes to that scale.
    """
    if weight_scales not in WEIGHT_SCALES:
        raise ValueError(f"weight_scales = {weight_scales!r} is not one of "
                         f"{', '.join(WEIGHT_SCALES)}")
    if estimator not in RANGE_ESTIMATORS:
        raise ValueError(f"estimator = {estimator!r} is not one of {', '.join(RANGE_ESTIMATORS)}")
    if estimator == "percentile" and not 50.0 <= percentile <= 100.0:
        raise ValueError(f"percentile = {percentile} is out of range: allowed 50..100")
    pct = percentile if estimator == "percentile" else None
    A, Wb, M = cfg.act_bits, cfg.weight_bits, cfg.requant_mult_bits
    x = _sequences(calib_x, cfg.d_model, "calib_x")
    if pos_enc is not None:
        mode, grid = pos_enc
        x = [xs + encoding_float(len(xs), cfg.d_model, mode, 0, grid) for xs in x]
    kv = x if calib_kv is None else _sequences(calib_kv, cfg.d_model, "calib_kv")
    if len(kv) != len(x):
        raise ValueError(f"calib_x has {len(x)} sequences and calib_kv {len(kv)}: expected "
                         f"one kv sequence per x sequence")
    lens = [len(k) for k in kv] if key_len is None else \
        [int(n) for n in np.broadcast_to(np.asarray(key_len), (len(x),))]
    runs = [attention_float(cfg, layer, xs, kvs, causal=causal, key_len=n, scoring=scoring,
                            return_intermediates=True) for xs, kvs, n in zip(x, kv, lens)]
    out = np.concatenate([r[0] for r in runs])
    mid = {n: np.concatenate([r[1][n] for r in runs]) for n in ("q", "k", "v", "attn")}
    x, kv = np.concatenate(x), np.concatenate(kv)
    if scoring not in ("dot", "additive"):
        raise ValueError(f"scoring = {scoring!r} is not one of dot, additive")
    if scoring == "additive" and layer.wa is None:
        raise ValueError("additive scoring needs the float layer's wa vectors")

    s = {"x": symmetric_scale(x, A, pct), "kv": symmetric_scale(kv, A, pct)}
    if scoring == "additive":
        s["wa"] = symmetric_scale(layer.wa, Wb)
    if calib_kv is None:
        s["kv"] = s["x"]
    for n in ("wq", "wk", "wv", "wo"):
        wt = getattr(layer, n)
        s[n] = symmetric_scale(wt, Wb)
        if weight_scales == "channel":
            # A row of (near) zeros would get a vanishing scale and blow its bias up to the
            # clamp: no channel's scale goes below 2**-8 of the whole tensor's.
            s[n] = np.maximum(np.array([symmetric_scale(row, Wb) for row in wt]),
                              s[n] * 2.0 ** -8)
    for n in ("q", "k", "v", "attn"):
        s[n] = symmetric_scale(mid[n], A, pct)
    if scoring == "additive":
        s["q"] = s["k"] = max(s["q"], s["k"])
    s["out"] = symmetric_scale(out, A, pct)

    blim = cfg.projection_bias_limit

    def bias(b, scale):
        return np.clip(np.floor(np.asarray(b) / scale + 0.5), -blim, blim).astype(np.int64)

    ins = {"q": "x", "k": "kv", "v": "kv"}
    # Weights are (out, in): a per-channel scale is one per row.
    w = {n: quantize_tensor(getattr(layer, n), np.reshape(s[n], (-1, 1)), Wb)
         for n in ("wq", "wk", "wv", "wo")}
    b = {f"b{t}": bias(getattr(layer, f"b{t}"), s[ins[t]] * s[f"w{t}"]) for t in "qkv"}
    b["bo"] = bias(layer.bo, s["attn"] * s["wo"])
    requant = Requant.from_real if weight_scales == "tensor" else ChannelRequant.from_real
    rq = {f"rq_{t}": requant(s[ins[t]] * s[f"w{t}"] / s[t], M, what=f"rq_{t}") for t in "qkv"}
    rq["rq_pv"] = Requant.from_real(2.0 ** -cfg.prob_bits * s["v"] / s["attn"], M, what="rq_pv")
    rq["rq_o"] = requant(s["attn"] * s["wo"] / s["out"], M, what="rq_o")
    extra = {}
    if scoring == "additive":
        c = s["wa"] * 2.0 ** -TANH_BITS * math.log2(math.e) * 2 ** cfg.exp_frac_bits
        tm = Requant.from_real(s["q"] * 2 ** TANH_ARG_FRAC, M, what="tanh argument multiplier")
        extra = {"scoring": "additive", "tanh_mult": tm.mult, "tanh_shift": tm.shift,
                 "wa": quantize_tensor(layer.wa, s["wa"], Wb)}
    else:
        c = s["q"] * s["k"] * math.log2(math.e) / math.sqrt(cfg.head_dim) * 2 ** cfg.exp_frac_bits
    if pos_enc is not None:
        pm = Requant.from_real(2.0 ** -PE_BITS / s["x"], M, what="positional encoding multiplier")
        extra.update(pe_mult=pm.mult, pe_shift=pm.shift)
    ex = Requant.from_real(c, cfg.exp_mult_bits, what="score-to-exponent multiplier")
    layer_q = QuantizedLayer(**w, **b, **rq, exp_mult=ex.mult, exp_shift=ex.shift, scales=s,
                             **extra)
    layer_q.check(cfg)
    return layer_q
