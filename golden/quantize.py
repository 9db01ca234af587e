"""Post-training quantization: float layer + calibration data in, :class:`QuantizedLayer` out.

Per-tensor symmetric scales (zero point 0): ``s = max|t| / (2**(bits-1) - 1)``, with ``max|t|``
taken from the float reference run on the calibration activations. Biases are quantized to the
accumulator's scale ``s_in * s_w``. Every real multiplier becomes a :class:`Requant`.
"""

from __future__ import annotations

import math

import numpy as np

from .attention import QuantizedLayer
from .config import AttentionConfig
from .fixed import Requant
from .reference import FloatLayer, attention_float

__all__ = ["quantize_tensor", "symmetric_scale", "quantize_layer", "dequantize"]


def symmetric_scale(t, bits: int) -> float:
    peak = float(np.max(np.abs(t))) if np.size(t) else 0.0
    return max(peak, 1e-12) / ((1 << (bits - 1)) - 1)


def quantize_tensor(t, scale: float, bits: int) -> np.ndarray:
    """``clamp(floor(t / scale + 1/2))``: float to signed ``bits`` integers (round half up)."""
    lim = 1 << (bits - 1)
    return np.clip(np.floor(np.asarray(t, dtype=np.float64) / scale + 0.5),
                   -lim, lim - 1).astype(np.int64)


def dequantize(t, scale: float) -> np.ndarray:
    return np.asarray(t, dtype=np.float64) * scale


def quantize_layer(cfg: AttentionConfig, layer: FloatLayer, calib_x, calib_kv=None, *,
                   causal: bool = False, kv_len=None) -> QuantizedLayer:
    """Quantize ``layer`` for ``cfg`` using calibration activations ``calib_x`` and, for
    cross-attention, ``calib_kv``.

    ``calib_x`` is one sequence (seq_len, d_model) or several, (sequences, seq_len, d_model);
    ``calib_kv`` likewise, with the same number of sequences. Each sequence runs through the
    float reference on its own (stacking sequences into one would let every row attend over
    all of them and shrink the attention output's range), with the mask the layer will run
    with: ``causal``, and ``kv_len`` (an int, or one per sequence) for key padding. The
    intermediate scales are the maxima over all sequences; ``scales`` in the result records
    all of them.
    """
    A, Wb, M = cfg.act_bits, cfg.weight_bits, cfg.requant_mult_bits
    x = np.asarray(calib_x, dtype=np.float64)
    if x.ndim == 2:
        x = x[None]
    kv = x if calib_kv is None else np.asarray(calib_kv, dtype=np.float64)
    if kv.ndim == 2:
        kv = kv[None]
    if x.ndim != 3 or kv.ndim != 3 or kv.shape[0] != x.shape[0]:
        raise ValueError(f"calib_x {x.shape} and calib_kv {kv.shape} must be (seq_len, "
                         f"d_model) or (sequences, rows, d_model) with equal sequences")
    lens = np.broadcast_to(np.asarray(kv_len if kv_len is not None else kv.shape[1]),
                           (x.shape[0],))
    runs = [attention_float(cfg, layer, xs, kvs, causal=causal, kv_len=int(n),
                            return_intermediates=True) for xs, kvs, n in zip(x, kv, lens)]
    out = np.stack([r[0] for r in runs])
    mid = {n: np.stack([r[1][n] for r in runs]) for n in ("q", "k", "v", "attn")}

    s = {"x": symmetric_scale(x, A), "kv": symmetric_scale(kv, A)}
    if calib_kv is None:
        s["kv"] = s["x"]
    for n in ("wq", "wk", "wv", "wo"):
        s[n] = symmetric_scale(getattr(layer, n), Wb)
    for n in ("q", "k", "v", "attn"):
        s[n] = symmetric_scale(mid[n], A)
    s["out"] = symmetric_scale(out, A)

    blim = cfg.projection_bias_limit

    def bias(b, scale):
        return np.clip(np.floor(np.asarray(b) / scale + 0.5), -blim, blim).astype(np.int64)

    ins = {"q": "x", "k": "kv", "v": "kv"}
    w = {n: quantize_tensor(getattr(layer, n), s[n], Wb) for n in ("wq", "wk", "wv", "wo")}
    b = {f"b{t}": bias(getattr(layer, f"b{t}"), s[ins[t]] * s[f"w{t}"]) for t in "qkv"}
    b["bo"] = bias(layer.bo, s["attn"] * s["wo"])
    rq = {f"rq_{t}": Requant.from_real(s[ins[t]] * s[f"w{t}"] / s[t], M, what=f"rq_{t}")
          for t in "qkv"}
    rq["rq_pv"] = Requant.from_real(2.0 ** -cfg.prob_bits * s["v"] / s["attn"], M, what="rq_pv")
    rq["rq_o"] = Requant.from_real(s["attn"] * s["wo"] / s["out"], M, what="rq_o")
    c = s["q"] * s["k"] * math.log2(math.e) / math.sqrt(cfg.head_dim) * 2 ** cfg.exp_frac_bits
    ex = Requant.from_real(c, cfg.exp_mult_bits, what="score-to-exponent multiplier")
    layer_q = QuantizedLayer(**w, **b, **rq, exp_mult=ex.mult, exp_shift=ex.shift, scales=s)
    layer_q.check(cfg)
    return layer_q
