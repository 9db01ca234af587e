"""Bit-exact fixed-point softmax, the golden model of ``hw/blocks/softmax.py``.

The method (docs/numerics.md, section "Softmax", has the widths and their reasons):

1. ``D = max(valid scores) - S`` for every valid score (masked scores take no part).
2. Base-2 exponent argument with ``F = exp_frac_bits`` fraction bits:
   ``u = (D * exp_mult + 2**(exp_shift-1)) >> exp_shift``; ``exp_mult * 2**-exp_shift`` is
   ``s_q * s_k * log2(e) / sqrt(d_k) * 2**F``.
3. ``n = min(u >> F, W + 2)``, ``f = u mod 2**F``; ``2**-f`` from an (L+1)-entry UQ1.T table,
   linearly interpolated on the low ``F - log2(L)`` bits of ``f`` (rounded add-then-shift).
4. ``E = round(mant * 2**(W - T - n))``, UQ1.W, so ``E = 2**W`` exactly for the row max.
5. ``sum = sum(E)``; ``p = floor(log2(sum))``; reciprocal ``q = floor(2**(p+R) / sum)``
   (``R = recip_bits``, so ``2**(R-1) < q <= 2**R``).
6. ``P = min((E * q + 2**(sh-1)) >> sh, 2**B - 1)`` with ``sh = p + R - B``: UQ0.B.

Masked positions get exactly 0. A row with no valid key produces all zeros.
"""

from __future__ import annotations

import math

import numpy as np

from .config import AttentionConfig
from .fixed import as_int64, round_shift

__all__ = ["exp_table", "exp2_neg", "softmax_int", "softmax_exp", "attention_mask", "SoftmaxTrace"]


def exp_table(cfg: AttentionConfig) -> np.ndarray:
    """The (L+1)-entry table ``round(2**(-i/L) * 2**T)``, i = 0..L, as int64 (a ROM constant)."""
    L, T = cfg.exp_table_size, cfg.exp_table_bits
    return np.array([math.floor(2.0 ** (T - i / L) + 0.5) for i in range(L + 1)],
                    dtype=np.int64)


def exp2_neg(u, cfg: AttentionConfig, frac_bits: int) -> np.ndarray:
    """``2**-(u / 2**F)`` rounded to ``frac_bits`` fraction bits (UQ1.frac_bits), for
    non-negative integer ``u`` with ``F = exp_frac_bits``: steps 3-4 of the method.

    The exponential unit of both softmax paths (the whole-row path uses ``frac_bits = W``,
    the key/value-tiled path its unnormalized probability width).
    """
    F, T, ib = cfg.exp_frac_bits, cfg.exp_table_bits, cfg.exp_interp_bits
    table = exp_table(cfg)
    u = as_int64(u)
    n = np.minimum(u >> F, frac_bits + 2)
    f = u & ((1 << F) - 1)
    idx = f >> ib
    t0 = table[idx]
    if ib:
        frac = f & ((1 << ib) - 1)
        t1 = table[idx + 1]
        mant = t0 - round_shift((t0 - t1) * frac, ib)
    else:
        mant = t0
    return round_shift(mant, n + T - frac_bits)


def softmax_exp(diff, cfg: AttentionConfig, exp_mult: int, exp_shift: int) -> np.ndarray:
    """Steps 2-4: ``E = 2**-(diff * c)`` as UQ1.W integers, for non-negative ``diff``."""
    d = as_int64(diff)
    if d.size and d.min() < 0:
        raise ValueError("softmax_exp needs max - score >= 0")
    return exp2_neg(round_shift(d * exp_mult, exp_shift), cfg, cfg.exp_bits)


def attention_mask(seq_len: int, kv_rows: int, *, causal: bool = False,
                   key_len: int | None = None) -> np.ndarray:
    """Boolean (seq_len, kv_rows) array of keys that count: ``j < key_len`` and, when causal,
    ``j <= i``."""
    key_len = kv_rows if key_len is None else key_len
    if not 0 <= key_len <= kv_rows:
        raise ValueError(f"key_len = {key_len} is out of range: allowed 0..{kv_rows}")
    j = np.arange(kv_rows)[None, :]
    valid = np.broadcast_to(j < key_len, (seq_len, kv_rows)).copy()
    if causal:
        valid &= j <= np.arange(seq_len)[:, None]
    return valid


class SoftmaxTrace:
    """Intermediate values of :func:`softmax_int` (per row: max, sum, p, recip)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def softmax_int(scores, cfg: AttentionConfig, exp_mult: int, exp_shift: int,
                valid=None, trace: bool = False):
    """Probabilities (UQ0.prob_bits, int64) of integer ``scores`` along the last axis.

    ``valid`` (bool, same shape) marks the scores that count; the others get 0.
    With ``trace``, returns ``(probs, SoftmaxTrace)``.
    """
    s = as_int64(scores)
    if valid is None:
        valid = np.ones(s.shape, dtype=bool)
    valid = np.broadcast_to(np.asarray(valid, dtype=bool), s.shape)
    B, R = cfg.prob_bits, cfg.recip_bits

    low = np.iinfo(np.int64).min
    row_max = np.where(valid, s, low).max(axis=-1, keepdims=True) if s.shape[-1] else \
        np.zeros(s.shape[:-1] + (1,), dtype=np.int64)
    diff = np.where(valid, row_max - np.where(valid, s, row_max), 0)
    e = np.where(valid, softmax_exp(diff, cfg, exp_mult, exp_shift), 0)
    total = e.sum(axis=-1, keepdims=True)
    # p = floor(log2(total)); frexp is exact for integers below 2**53.
    p = np.frexp(np.maximum(total, 1).astype(np.float64))[1].astype(np.int64) - 1
    recip = (np.left_shift(np.int64(1), p + R)) // np.maximum(total, 1)
    sh = p + R - B
    probs = np.minimum(round_shift(e * recip, sh), (1 << B) - 1)
    probs = np.where(total > 0, probs, 0)
    if trace:
        t = SoftmaxTrace(row_max=row_max[..., 0], exps=e, total=total[..., 0],
                         lead=p[..., 0], recip=recip[..., 0], shift=sh[..., 0])
        return probs, t
    return probs
