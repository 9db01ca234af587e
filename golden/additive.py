"""Additive (Bahdanau) attention scoring in integers: ``score(i, j) = sum_d w[d] tanh(q_i[d] +
k_j[d])`` per head, the golden model of the additive scorer (``hw/blocks/additive.py``).

Formats (docs/numerics.md, "Additive scoring"):

- Q and K share one scale ``s_qk`` in additive mode (the quantizer takes the larger of the
  two), so ``z = q + k`` is an exact 9-bit sum whose real value is ``s_qk z``.
- The tanh argument: ``a = round_shift(z * tanh_mult, tanh_shift)``, signed with
  ``TANH_ARG_FRAC`` fraction bits (``tanh_mult 2**-tanh_shift = s_qk 2**TANH_ARG_FRAC``).
- :func:`tanh_int`: odd symmetry, then ``|a|`` below ``TANH_ARG_MAX`` from a table of
  ``TANH_TABLE_SIZE + 1`` entries ``round(tanh(x) 2**TANH_TABLE_BITS)``, linearly
  interpolated (rounded add-then-shift); beyond it the last entry. Output signed
  ``S0.TANH_BITS``, ``|t| <= 2**TANH_BITS - 1``.
- The score ``S = sum_d w[d] t[d]``: ``w`` int8 (one vector per head, scale ``s_wa``), exact
  integer sum. It enters the dot-product path's softmax unchanged; only its multiplier
  differs: ``exp_mult 2**-exp_shift = s_wa 2**-TANH_BITS log2(e) 2**F`` (no ``1/sqrt(d_k)``:
  that scale belongs to the dot product).
"""

from __future__ import annotations

import math

import numpy as np

from .fixed import as_int64, round_shift

__all__ = ["TANH_ARG_FRAC", "TANH_ARG_MAX", "TANH_TABLE_SIZE", "TANH_TABLE_BITS",
           "TANH_BITS", "tanh_table", "tanh_int", "tanh_arg", "additive_scores"]

# Argument: 10 fraction bits (like the exponential's), magnitude below 8 (tanh(8) is within
# 2**-22 of 1, below half an output LSB).
TANH_ARG_FRAC = 10
TANH_ARG_MAX = 8
# 64 intervals of 1/8 with 7 interpolation bits: the measured error over every argument code
# is in docs/numerics.md; the table is 65 x 12 bits.
TANH_TABLE_SIZE = 64
TANH_TABLE_BITS = 11
# Output S0.7: an int8 operand beside the int8 weight vector, like every other product.
TANH_BITS = 7


def tanh_table(size: int = TANH_TABLE_SIZE, bits: int = TANH_TABLE_BITS,
               arg_max: int = TANH_ARG_MAX) -> np.ndarray:
    """``size + 1`` entries ``round(tanh(i arg_max / size) 2**bits)`` (a ROM constant)."""
    return np.array([math.floor(math.tanh(i * arg_max / size) * 2 ** bits + 0.5)
                     for i in range(size + 1)], dtype=np.int64)


def tanh_int(a, size: int = TANH_TABLE_SIZE, bits: int = TANH_TABLE_BITS,
             out_bits: int = TANH_BITS, frac: int = TANH_ARG_FRAC,
             arg_max: int = TANH_ARG_MAX) -> np.ndarray:
    """``tanh(a 2**-frac)`` as signed ``S0.out_bits`` integers, for signed argument codes."""
    a = as_int64(a)
    mag = np.minimum(np.abs(a), (arg_max << frac) - 1)
    ib = frac + arg_max.bit_length() - 1 - (size.bit_length() - 1)   # codes per interval, log2
    if ib < 0:
        raise ValueError(f"tanh table of {size} intervals is finer than the argument's LSB")
    tab = tanh_table(size, bits, arg_max)
    idx = mag >> ib
    t0 = tab[idx]
    val = t0 + round_shift((tab[idx + 1] - t0) * (mag & ((1 << ib) - 1)), ib) if ib else t0
    val = np.where(np.abs(a) >= arg_max << frac, tab[size], val)
    t = np.minimum(round_shift(val, bits - out_bits), (1 << out_bits) - 1)
    return np.where(a < 0, -t, t)


def tanh_arg(z, tanh_mult: int, tanh_shift: int) -> np.ndarray:
    """The tanh unit's argument code of ``z = q + k``."""
    return round_shift(as_int64(z) * tanh_mult, tanh_shift)


def additive_scores(q, k, w, tanh_mult: int, tanh_shift: int) -> np.ndarray:
    """Integer scores (rows of q, rows of k) of one head: ``sum_d w[d] tanh(q[d] + k[d])``."""
    q, k, w = as_int64(q), as_int64(k), as_int64(w)
    if q.shape[1] != k.shape[1] or w.shape != (q.shape[1],):
        raise ValueError(f"q {q.shape}, k {k.shape} and w {w.shape} must share d_k")
    t = tanh_int(tanh_arg(q[:, None, :] + k[None, :, :], tanh_mult, tanh_shift))
    return t @ w
