"""Float64 reference of the attention layer, with ``torch.nn.MultiheadAttention`` conventions.

``FloatLayer`` holds float weights as torch does: ``in_proj`` split into ``wq``, ``wk``, ``wv``
(each (d_model, d_model), (out, in) layout), ``out_proj`` ``wo``, and biases. The reference
computes, for row-vector inputs ``x`` (seq_len, d_model) and ``kv`` (kv_rows, d_model)::

    Q = x Wq^T + bq,  K = kv Wk^T + bk,  V = kv Wv^T + bv
    head h: softmax(Q_h K_h^T / sqrt(d_k) + mask) V_h
    out = concat(heads) Wo^T + bo

which equals ``torch.nn.MultiheadAttention(d_model, heads, batch_first=True)(x, kv, kv,
attn_mask=causal, key_padding_mask=j >= key_len)`` with its weights copied in. One difference:
torch returns NaN for a query row with no valid key; here such a row attends to nothing (its
probabilities are 0), exactly as the hardware does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import AttentionConfig
from .softmax import attention_mask

__all__ = ["FloatLayer", "attention_float", "softmax_float", "random_float_layer"]


@dataclass(frozen=True, eq=False)
class FloatLayer:
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    bq: np.ndarray
    bk: np.ndarray
    bv: np.ndarray
    bo: np.ndarray
    # Additive scoring's vectors, one per head (heads, head_dim); None: dot-product only.
    wa: np.ndarray | None = None


def softmax_float(scores, valid=None) -> np.ndarray:
    """Float64 softmax along the last axis; invalid entries get 0, empty rows all 0."""
    s = np.asarray(scores, dtype=np.float64)
    if valid is None:
        valid = np.ones(s.shape, dtype=bool)
    valid = np.broadcast_to(valid, s.shape)
    m = np.where(valid, s, -np.inf).max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(valid, np.exp(np.where(valid, s - m, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)


def attention_float(cfg: AttentionConfig, layer: FloatLayer, x, kv=None, *,
                    causal: bool = False, key_len: int | None = None,
                    scoring: str = "dot", pos_enc=None,
                    return_intermediates: bool = False):
    """Float64 layer output (seq_len, d_model); with ``return_intermediates`` also a dict of
    ``q``, ``k``, ``v``, ``attn`` (heads concatenated, before the output projection).

    ``scoring="additive"`` scores ``w_h . tanh(q_i + k_j)`` with ``layer.wa[h]`` (Bahdanau;
    no 1/sqrt(d_k)). ``pos_enc`` (seq_len, d_model), e.g. from
    :func:`golden.posenc.encoding_float`, is added to ``x`` before the projections (not to a
    cross-attention ``kv``)."""
    x = np.asarray(x, dtype=np.float64)
    if pos_enc is not None:
        kv_self = kv is None
        x = x + np.asarray(pos_enc, dtype=np.float64)
        kv = x if kv_self else kv
    kv = x if kv is None else np.asarray(kv, dtype=np.float64)
    if scoring not in ("dot", "additive"):
        raise ValueError(f"scoring = {scoring!r} is not one of dot, additive")
    if scoring == "additive" and layer.wa is None:
        raise ValueError("additive scoring needs the layer's wa vectors (heads, head_dim)")
    q = x @ layer.wq.T + layer.bq
    k = kv @ layer.wk.T + layer.bk
    v = kv @ layer.wv.T + layer.bv
    valid = attention_mask(x.shape[0], kv.shape[0], causal=causal, key_len=key_len)
    dk = cfg.head_dim
    attn = np.empty((x.shape[0], cfg.d_model))
    for h in range(cfg.heads):
        c = slice(h * dk, (h + 1) * dk)
        if scoring == "additive":
            s = np.tanh(q[:, None, c] + k[None, :, c]) @ layer.wa[h]
        else:
            s = q[:, c] @ k[:, c].T / np.sqrt(dk)
        p = softmax_float(s, valid)
        attn[:, c] = p @ v[:, c]
    out = attn @ layer.wo.T + layer.bo
    if return_intermediates:
        return out, {"q": q, "k": k, "v": v, "attn": attn}
    return out


def random_float_layer(cfg: AttentionConfig, rng: np.random.Generator,
                       bias_scale: float = 0.02, additive: bool = False) -> FloatLayer:
    """Xavier-uniform weights (torch's MHA initialisation) and small random biases; with
    ``additive`` also the additive-scoring vectors (drawn last, so the other weights are the
    same for the same generator state)."""
    d = cfg.d_model
    bound = np.sqrt(6.0 / (2 * d))
    w = {n: rng.uniform(-bound, bound, (d, d)) for n in ("wq", "wk", "wv", "wo")}
    b = {n: rng.normal(0.0, bias_scale, d) for n in ("bq", "bk", "bv", "bo")}
    if not additive:
        return FloatLayer(**w, **b)
    # Additive vectors: uniform like a Linear(head_dim, 1) (torch's default initialisation).
    wa = rng.uniform(-1.0, 1.0, (cfg.heads, cfg.head_dim)) / np.sqrt(cfg.head_dim)
    return FloatLayer(**w, **b, wa=wa)
