"""Bit-exact integer multi-head attention layer: the golden model of ``attention_top``.

Conventions follow ``torch.nn.MultiheadAttention``: activations are row vectors, weights are
stored (out_features, in_features) and applied as ``x @ W.T + b``. Per head ``h`` (columns
``h*d_k .. (h+1)*d_k`` of Q, K, V)::

    Q  = rq_q(X  Wq^T + bq)        int8            (X: seq_len x d_model, int8)
    K  = rq_k(KV Wk^T + bk)        int8            (KV = X unless cross-attention)
    V  = rq_v(KV Wv^T + bv)        int8
    S  = Q_h K_h^T                 int32 scores
    P  = softmax_int(S, mask)      UQ0.prob_bits   (1/sqrt(d_k) folded into exp_mult)
    A_h = rq_pv(P V_h)             int8
    Y  = rq_o(concat(A_h) Wo^T + bo)  int8
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .config import AttentionConfig
from .fixed import Requant, as_int64, is_per_channel, matmul_acc, requantize
from .additive import additive_scores
from .online_softmax import attend_tiled, tiled_format
from .posenc import add_encoding, encoding_int
from .softmax import attention_mask, softmax_int

__all__ = ["QuantizedLayer", "attention_int", "AttentionTrace", "check_run_args"]


@dataclass(frozen=True, eq=False)
class QuantizedLayer:
    """Integer parameters of one attention layer (what the hardware holds resident).

    Weights are int (d_model, d_model) in (out, in) layout; biases int (d_model,).
    ``scales`` holds the float scales they were derived from (for dequantization only; the
    integer path never reads them).
    """

    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    bq: np.ndarray
    bk: np.ndarray
    bv: np.ndarray
    bo: np.ndarray
    rq_q: Requant
    rq_k: Requant
    rq_v: Requant
    rq_pv: Requant
    rq_o: Requant
    exp_mult: int
    exp_shift: int
    scales: dict = field(default_factory=dict)
    # Additive scoring (golden/additive.py): the layer was quantized for it (Q and K share a
    # scale, exp_mult/exp_shift convert additive scores), wa (heads, head_dim) int8 vectors,
    # and the multiplier from q + k to the tanh argument.
    scoring: str = "dot"
    wa: np.ndarray | None = None
    tanh_mult: int = 0
    tanh_shift: int = 1
    # Positional encoding (golden/posenc.py): code * pe_mult 2**-pe_shift in x's units
    # (pe_mult 0: the layer was not calibrated with an encoding).
    pe_mult: int = 0
    pe_shift: int = 1

    WEIGHTS = ("wq", "wk", "wv", "wo")
    BIASES = ("bq", "bk", "bv", "bo")
    REQUANTS = ("rq_q", "rq_k", "rq_v", "rq_pv", "rq_o")

    def check(self, cfg: AttentionConfig) -> None:
        """Raise ``ValueError`` naming the first parameter that does not fit ``cfg``."""
        d = cfg.d_model
        wlim = 1 << (cfg.weight_bits - 1)
        for n in self.WEIGHTS:
            w = getattr(self, n)
            if w.shape != (d, d):
                raise ValueError(f"{n} has shape {w.shape}: expected ({d}, {d})")
            if w.size and (w.min() < -wlim or w.max() > wlim - 1):
                raise ValueError(f"{n} holds values outside -{wlim}..{wlim - 1}")
        blim = cfg.projection_bias_limit
        for n in self.BIASES:
            b = getattr(self, n)
            if b.shape != (d,):
                raise ValueError(f"{n} has shape {b.shape}: expected ({d},)")
            if b.size and np.abs(as_int64(b)).max() > blim:
                raise ValueError(f"{n} holds values outside -{blim}..{blim}")
        mlim = (1 << cfg.requant_mult_bits) - 1
        for n in self.REQUANTS:
            rq = getattr(self, n)
            mult = np.atleast_1d(rq.mult)
            if is_per_channel(rq) and (n == "rq_pv" or mult.shape != (d,)):
                raise ValueError(f"{n} is per-channel with {mult.size} multipliers: only the "
                                 f"projections (rq_q, rq_k, rq_v, rq_o) may be, with {d}")
            if mult.size and (mult.min() < 0 or mult.max() > mlim):
                raise ValueError(f"{n}.mult = {mult.max() if mult.max() > mlim else mult.min()} "
                                 f"is out of range: allowed 0..{mlim}")
        if self.scoring not in ("dot", "additive"):
            raise ValueError(f"scoring = {self.scoring!r} is not one of dot, additive")
        if self.scoring == "additive":
            if not self.tanh_mult:
                raise ValueError("tanh_mult = 0: an additive layer needs the tanh argument's "
                                 "multiplier")
            hd = (cfg.heads, cfg.head_dim)
            if self.wa is None or np.shape(self.wa) != hd:
                raise ValueError(f"wa has shape {np.shape(self.wa)}: expected {hd} for additive "
                                 f"scoring")
            if self.wa.size and (self.wa.min() < -wlim or self.wa.max() > wlim - 1):
                raise ValueError(f"wa holds values outside -{wlim}..{wlim - 1}")
        for n in ("tanh", "pe"):
            mult, shift = getattr(self, f"{n}_mult"), getattr(self, f"{n}_shift")
            if not 0 <= mult <= mlim:
                raise ValueError(f"{n}_mult = {mult} is out of range: allowed 0..{mlim}")
            if not 1 <= shift <= 62:
                raise ValueError(f"{n}_shift = {shift} is out of range: allowed 1..62")
        elim = (1 << cfg.exp_mult_bits) - 1
        if not 0 <= self.exp_mult <= elim:
            raise ValueError(f"exp_mult = {self.exp_mult} is out of range: allowed 0..{elim}")
        if not 1 <= self.exp_shift <= 62:
            raise ValueError(f"exp_shift = {self.exp_shift} is out of range: allowed 1..62")

    @property
    def per_channel(self) -> bool:
        """Whether any projection requantizes per output channel."""
        return any(is_per_channel(getattr(self, n)) for n in self.REQUANTS)

    def arrays(self) -> dict:
        """Flat dict of every integer parameter (for .npz export)."""
        out = {n: as_int64(getattr(self, n)) for n in self.WEIGHTS + self.BIASES}
        for n in self.REQUANTS:
            rq = getattr(self, n)
            out[f"{n}_mult"] = as_int64(rq.mult)
            out[f"{n}_shift"] = as_int64(rq.shift)
        out["exp_mult"] = np.int64(self.exp_mult)
        out["exp_shift"] = np.int64(self.exp_shift)
        if self.scoring == "additive":
            out["wa"] = as_int64(self.wa)
            out["tanh_mult"] = np.int64(self.tanh_mult)
            out["tanh_shift"] = np.int64(self.tanh_shift)
        if self.pe_mult:
            out["pe_mult"] = np.int64(self.pe_mult)
            out["pe_shift"] = np.int64(self.pe_shift)
        return out


@dataclass
class AttentionTrace:
    """Every intermediate tensor of one run of :func:`attention_int`."""

    q: np.ndarray        # (seq_len, d_model) int8
    k: np.ndarray        # (kv_rows, d_model) int8
    v: np.ndarray        # (kv_rows, d_model) int8
    scores: np.ndarray   # (heads, seq_len, kv_rows) int32
    valid: np.ndarray    # (seq_len, kv_rows) bool
    probs: np.ndarray    # (heads, seq_len, kv_rows) UQ0.prob_bits
    attn: np.ndarray     # (seq_len, d_model) int8, heads concatenated
    out: np.ndarray      # (seq_len, d_model) int8


def check_run_args(cfg: AttentionConfig, x, kv, causal: bool, key_len) -> tuple:
    """Validate one run's inputs against ``cfg``; returns ``(x, kv, key_len)`` as int64."""
    x = as_int64(x)
    if x.ndim != 2 or x.shape[1] != cfg.d_model:
        raise ValueError(f"x has shape {x.shape}: expected (seq_len, {cfg.d_model})")
    if not 1 <= x.shape[0] <= cfg.max_seq_len:
        raise ValueError(f"seq_len = {x.shape[0]} is out of range: allowed 1..{cfg.max_seq_len}")
    alim = 1 << (cfg.act_bits - 1)
    if kv is None:
        if x.shape[0] > cfg.max_kv_len:
            raise ValueError(
                f"seq_len = {x.shape[0]} is out of range for self-attention: allowed "
                f"1..{min(cfg.max_seq_len, cfg.max_kv_len)} (the queries are also the keys)")
        kv = x
    else:
        if not cfg.cross_attention:
            raise ValueError("cross-attention input given but cross_attention is disabled")
        kv = as_int64(kv)
        if kv.ndim != 2 or kv.shape[1] != cfg.d_model:
            raise ValueError(f"kv has shape {kv.shape}: expected (kv_rows, {cfg.d_model})")
        if not 1 <= kv.shape[0] <= cfg.max_kv_len:
            raise ValueError(
                f"kv rows = {kv.shape[0]} is out of range: allowed 1..{cfg.max_kv_len}")
    for name, a in (("x", x), ("kv", kv)):
        if a.min() < -alim or a.max() > alim - 1:
            raise ValueError(f"{name} holds values outside -{alim}..{alim - 1}")
    if causal and not cfg.causal_mask:
        raise ValueError("causal mask requested but causal_mask is disabled in the configuration")
    key_len = kv.shape[0] if key_len is None else int(key_len)
    if not 1 <= key_len <= kv.shape[0]:
        raise ValueError(f"key_len = {key_len} is out of range: allowed 1..{kv.shape[0]}")
    return x, kv, key_len


def attention_int(cfg: AttentionConfig, layer: QuantizedLayer, x, kv=None, *,
                  causal: bool = False, key_len: int | None = None,
                  kv_tile: int | None = None, pos_enc: str = "off", pe_offset: int = 0,
                  grid_width: int | None = None, trace: bool = False):
    """Run the integer layer on int8 ``x`` (seq_len, d_model).

    ``kv`` (kv_rows, d_model) is the cross-attention input (default: ``x``). ``key_len`` keeps
    only the first ``key_len`` keys (key padding). ``causal`` masks key j > query i.
    ``kv_tile`` selects the key/value-tiled path with that many keys per tile
    (:mod:`golden.online_softmax`; its trace has no probabilities), 0 the whole-row path;
    ``None`` (the default) is the path the configuration builds (``cfg.kv_tile``). ``pos_enc`` ("off", "1d", "2d" with
    ``grid_width``) adds the positional encoding to ``x`` (after its input, before the
    projections; a cross-attention ``kv`` gets none); ``pe_offset`` is the PE_OFFSET register:
    the position of row 0 (1-D), or its grid row (2-D: row ``i`` is at position
    ``pe_offset * grid_width + i``, so an image is sent in pieces of whole grid rows). The layer's
    ``scoring`` chooses dot-product or additive scores.
    Returns the int8 output (seq_len, d_model), or an :class:`AttentionTrace` with ``trace``.
    """
    self_attention = kv is None
    x, kv, key_len = check_run_args(cfg, x, kv, causal, key_len)
    A, acc = cfg.act_bits, cfg.acc_bits
    if pos_enc != "off":
        if not layer.pe_mult:
            raise ValueError("positional encoding requested but the layer was quantized without "
                             "one (pe_mult = 0)")
        if pos_enc == "2d" and (not grid_width or x.shape[0] % grid_width):
            raise ValueError(f"grid_width = {grid_width!r} must divide seq_len = {x.shape[0]} "
                             f"(the 2-D encoding takes whole grid rows)")
        first = pe_offset * grid_width if pos_enc == "2d" else pe_offset
        codes = encoding_int(x.shape[0], cfg.d_model, pos_enc, first, grid_width)
        x = add_encoding(x, codes, layer.pe_mult, layer.pe_shift, A)
        kv = x if self_attention else kv
    q = requantize(matmul_acc(x, layer.wq.T, layer.bq, acc), layer.rq_q, A)
    k = requantize(matmul_acc(kv, layer.wk.T, layer.bk, acc), layer.rq_k, A)
    v = requantize(matmul_acc(kv, layer.wv.T, layer.bv, acc), layer.rq_v, A)

    valid = attention_mask(x.shape[0], kv.shape[0], causal=causal, key_len=key_len)
    H, dk = cfg.heads, cfg.head_dim
    scores = np.empty((H, x.shape[0], kv.shape[0]), dtype=np.int64)
    probs = np.zeros_like(scores)
    attn = np.empty((x.shape[0], cfg.d_model), dtype=np.int64)
    if kv_tile is None:
        kv_tile = cfg.kv_tile
    fmt = tiled_format(cfg, kv_tile) if kv_tile else None
    for h in range(H):
        cols = slice(h * dk, (h + 1) * dk)
        if layer.scoring == "additive":
            scores[h] = additive_scores(q[:, cols], k[:, cols], layer.wa[h], layer.tanh_mult,
                                        layer.tanh_shift)
        else:
            scores[h] = matmul_acc(q[:, cols], k[:, cols].T, None, acc)
        if fmt is not None:
            attn[:, cols] = attend_tiled(cfg, scores[h], v[:, cols], valid, layer.exp_mult,
                                         layer.exp_shift, layer.rq_pv, fmt)
            continue
        probs[h] = softmax_int(scores[h], cfg, layer.exp_mult, layer.exp_shift, valid)
        attn[:, cols] = requantize(matmul_acc(probs[h], v[:, cols], None, acc), layer.rq_pv, A)
    out = requantize(matmul_acc(attn, layer.wo.T, layer.bo, acc), layer.rq_o, A)
    if trace:
        return AttentionTrace(q=q, k=k, v=v, scores=scores, valid=valid, probs=probs,
                              attn=attn, out=out)
    return out
