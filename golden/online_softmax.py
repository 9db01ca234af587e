"""Bit-exact key/value-tiled attention with an integer online softmax (the long-sequence path).

The whole-row path (:func:`golden.softmax.softmax_int`, then ``P V``) needs one head's whole
``seq_len x kv_len`` score matrix before the first probability. This path walks the keys and
values in tiles of ``kv_tile`` and keeps, per query row, a running maximum, a running sum and a
running output accumulator (Milakov & Gimelshein; FlashAttention), all in integers
(docs/numerics.md, "Key/value-tiled attention" has the formats and the error bound):

1. Scores to base-2 units: ``y = round_shift(S * exp_mult, exp_shift)`` (signed, ``F``
   fraction bits; ``exp_mult * 2**-exp_shift`` is the whole-row path's multiplier).
2. Per tile, the running maximum ``M`` is an *integer* number of octaves:
   ``M = max(M, ceil(max(y of the tile's valid keys) / 2**F))``. When it rises by ``d``, the
   running sum ``l`` and accumulator ``O`` are rescaled by ``2**-d``: ``round_shift(., d)``.
3. Unnormalized probabilities ``E = 2**-(M - y/2**F)`` from the whole-row path's exponential
   unit, rounded to ``tile_prob_bits`` fraction bits: UQ1.Bt, ``2**(Bt-1) < E <= 2**Bt`` for
   the tile's largest score. Masked keys get exactly 0.
4. ``l += sum(E)``, ``O += E V``, exact: the array computes ``E V`` (E is a ``Bt + 2``-bit
   signed operand), and the sum is of the same E that enter ``E V``. No guard bits: a rescale
   rounds by at most half an LSB of E, and every later rise of the maximum (at least one
   octave) halves what earlier roundings left, so all of them together stay below one LSB.
5. Once per row, at the end: ``p = floor(log2 l)``, ``q = floor(2**(p+R) / l)``,
   ``acc = round_shift(O * q, p + R - B - G)`` -- the whole-row path's ``P V`` accumulator
   (P in UQ0.B) with ``G`` more fraction bits -- and ``A = sat(round_shift(acc * rq.mult,
   rq.shift + G))``. A row with no valid key gives ``A = 0``, as the whole-row path does.

Every rounding is the integer add-then-shift of :func:`golden.fixed.round_shift`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import AttentionConfig
from .fixed import Requant, as_int64, round_shift, saturate
from .softmax import exp2_neg

__all__ = ["TiledFormat", "tiled_format", "score_log2", "RowState", "softmax_tile",
           "row_reciprocal", "normalize_acc", "tile_output", "attend_tiled", "attend_rows"]

# Fraction bits of E, UQ1.16: the array operand (with its sign) is 18 bits, one ECP5
# MULT18X18D, and 16 bits keep the mass of many small E (each rounded to 0 below 2**-17 of the
# row maximum) under the output's LSB up to 4096 keys (docs/numerics.md).
TILE_PROB_BITS = 16

# Fraction bits of the normalized accumulator above the whole-row path's P.V accumulator, so
# the final requantization rounds once at the output's LSB (not at 2**-B first).
NORM_GUARD_BITS = 8
# Bits of the running sum kept for the final division (O is cut to the same scale first).
NORM_SUM_BITS = 24


@dataclass(frozen=True)
class TiledFormat:
    """Widths of the tiled path for one configuration (docs/numerics.md)."""

    kv_tile: int          # keys per tile
    tiles: int            # tiles of the longest key sequence
    prob_bits: int        # Bt: fraction bits of the unnormalized probability E (UQ1.Bt)
    sum_bits: int         # unsigned width of the running sum l
    out_acc_bits: int     # signed width of the running accumulator O
    norm_guard_bits: int  # G: fraction bits of the normalized accumulator below 2**-B

    @property
    def operand_bits(self) -> int:
        """Signed width of E as the array's operand (UQ1.Bt is Bt + 1 bits, plus a sign)."""
        return self.prob_bits + 2


def tiled_format(cfg: AttentionConfig, kv_tile: int, prob_bits: int = TILE_PROB_BITS,
                 max_kv_len: int | None = None) -> TiledFormat:
    """The widths for ``kv_tile`` keys per tile and ``prob_bits`` (Bt) bits of E."""
    n = cfg.max_kv_len if max_kv_len is None else int(max_kv_len)
    if not 1 <= kv_tile <= n:
        raise ValueError(f"kv_tile = {kv_tile} is out of range: allowed 1..{n}")
    if not 2 <= prob_bits <= 24:
        raise ValueError(f"tile prob_bits = {prob_bits} is out of range: allowed 2..24")
    # The array's accumulator holds one tile's E V exactly: kv_tile * 2**Bt * 2**(A-1).
    tile_peak = kv_tile << (prob_bits + cfg.act_bits - 1)
    if tile_peak > 1 << (cfg.acc_bits - 1):
        allowed = (1 << (cfg.acc_bits - 1)) >> (prob_bits + cfg.act_bits - 1)
        raise ValueError(
            f"kv_tile = {kv_tile} is too large for acc_bits = {cfg.acc_bits}: one tile's E.V "
            f"reaches {tile_peak}; allowed kv_tile <= {allowed}")
    tiles = -(-n // kv_tile)
    # l <= n * 2**Bt (a rescale never raises it); |O| <= l * 2**(A-1).
    sum_bits = (n << prob_bits).bit_length()
    out_acc_bits = sum_bits + cfg.act_bits
    return TiledFormat(kv_tile, tiles, prob_bits, sum_bits, out_acc_bits, NORM_GUARD_BITS)


def score_log2(scores, exp_mult: int, exp_shift: int) -> np.ndarray:
    """Step 1: scores in base-2 units with ``F`` fraction bits (signed)."""
    return round_shift(as_int64(scores) * exp_mult, exp_shift)


@dataclass(frozen=True)
class RowState:
    """What the tiled softmax keeps per query row between tiles: whether a valid key was seen
    (``started``), the running maximum ``M`` (integer octaves) and the running sum ``l``."""

    started: np.ndarray
    row_max: np.ndarray
    row_sum: np.ndarray

    @classmethod
    def empty(cls, rows: int) -> "RowState":
        """The state before a row's first tile."""
        zeros = np.zeros(rows, dtype=np.int64)
        return cls(np.zeros(rows, dtype=bool), zeros, zeros.copy())


def softmax_tile(cfg: AttentionConfig, fmt: TiledFormat, y, valid, state: RowState):
    """Steps 2-4 for one tile: ``y`` (rows, keys of the tile) in base-2 units
    (:func:`score_log2`), ``valid`` the keys that count. Returns ``(E, rise, state)``: the
    unnormalized probabilities (UQ1.Bt, 0 for masked keys), per row the rescale shift of the
    running values (``O`` of the caller, and ``l`` here, already applied) and the new state.

    A tile in which a row has no valid key leaves that row's state as it was (rise 0). The
    rise is capped at ``out_acc_bits + 1``: a larger one empties ``l`` and ``O`` all the same.
    """
    F = cfg.exp_frac_bits
    y = as_int64(y)
    valid = np.broadcast_to(np.asarray(valid, dtype=bool), y.shape)
    low = np.iinfo(np.int64).min
    seen = valid.any(axis=1)
    tile_max = _ceil_octave(np.where(valid, y, low).max(axis=1), F)
    m_old, started = state.row_max, state.started
    m_new = np.where(seen, np.where(started, np.maximum(m_old, tile_max), tile_max), m_old)
    rise = np.minimum(np.where(started, m_new - m_old, 0), fmt.out_acc_bits + 1)
    u = np.where(valid, (m_new << F)[:, None] - y, 0)
    e = np.where(valid, exp2_neg(u, cfg, fmt.prob_bits), 0)
    lsum = round_shift(state.row_sum, rise) + e.sum(axis=1)
    return e, rise, RowState(started | seen, m_new, lsum)


def _ceil_octave(y, frac_bits: int):
    """``ceil(y / 2**F)`` for signed integers."""
    return -((-as_int64(y)) >> frac_bits)


def row_reciprocal(lsum, recip_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 5's divisor per row: ``(q, p)`` with ``p = floor(log2 l)`` and ``q =
    floor(2**(p+R) / l)`` (``l = 0``, a row with no valid key, is taken as 1)."""
    lsum = np.maximum(as_int64(lsum), 1)
    lead = np.frexp(lsum.astype(np.float64))[1].astype(np.int64) - 1
    return np.left_shift(np.int64(1), lead + recip_bits) // lsum, lead


def normalize_acc(acc, recip, lead, recip_bits: int, prob_bits: int, guard: int) -> np.ndarray:
    """``O / l`` as the whole-row path's P.V accumulator with ``guard`` more fraction bits,
    from the row's ``(q, p)`` (:func:`row_reciprocal`).

    O first loses its bits below ``2**(p - NORM_SUM_BITS)`` (rounded), which keeps ``O * q``
    within 51 bits for any tile count; the error that costs is below 2**-NORM_SUM_BITS of
    a value unit, far under the output's LSB.
    """
    recip, lead = as_int64(recip), as_int64(lead)
    drop = np.maximum(lead - NORM_SUM_BITS, 0)
    o = round_shift(as_int64(acc), drop[..., None])
    return round_shift(o * recip[..., None],
                       (lead - drop + recip_bits - prob_bits - guard)[..., None])


def tile_output(cfg: AttentionConfig, fmt: TiledFormat, acc, recip, lead, started,
                rq: Requant) -> np.ndarray:
    """Step 5 whole: the attention output (int ``act_bits``) of the rows' final accumulators
    ``O`` (rows, d_v), reciprocals and ``started`` flags; 0 for a row with no valid key."""
    G = fmt.norm_guard_bits
    norm = normalize_acc(acc, recip, lead, cfg.recip_bits, cfg.prob_bits, G)
    out = saturate(round_shift(norm * rq.mult, rq.shift + G), cfg.act_bits)
    return np.where(np.asarray(started, dtype=bool)[..., None], out, 0)


@dataclass
class TiledTrace:
    """Per-row state at the end of :func:`attend_tiled` (for tests and the hardware twin)."""

    row_max: np.ndarray   # M, integer octaves (rows with no valid key: 0)
    row_sum: np.ndarray   # l
    out_acc: np.ndarray   # O, (rows, d_v)
    rescales: np.ndarray  # how many tiles raised M after the first
    norm_acc: np.ndarray  # acc, the normalized P.V accumulator with G guard bits


def attend_tiled(cfg: AttentionConfig, scores, v, valid, exp_mult: int, exp_shift: int,
                 rq: Requant, fmt: TiledFormat, trace: bool = False):
    """Attention output ``A`` (rows, d_v), int ``act_bits``, of integer ``scores``
    (rows, kv_rows) and values ``v`` (kv_rows, d_v) by the tiled path.

    ``valid`` (rows, kv_rows) marks the keys that count. ``rq`` is the P.V requantizer of the
    whole-row path (real multiplier ``2**-B s_v / s_attn``). With ``trace``, returns
    ``(A, TiledTrace)``.
    """
    s = as_int64(scores)
    v = as_int64(v)
    valid = np.broadcast_to(np.asarray(valid, dtype=bool), s.shape)
    rows, kv_rows = s.shape
    if v.shape[0] != kv_rows:
        raise ValueError(f"v has {v.shape[0]} rows: expected {kv_rows} (one per key)")
    B, R, G = cfg.prob_bits, cfg.recip_bits, fmt.norm_guard_bits
    if kv_rows > fmt.tiles * fmt.kv_tile:
        raise ValueError(f"{kv_rows} keys exceed the format's {fmt.tiles} tiles of "
                         f"{fmt.kv_tile}: build it with max_kv_len >= {kv_rows}")
    if rq.shift + G > 62:
        raise ValueError(f"rq.shift = {rq.shift} is out of range for the tiled path: allowed "
                         f"<= {62 - G} (it shifts by rq.shift + {G})")
    y = score_log2(s, exp_mult, exp_shift)
    state = RowState.empty(rows)
    acc = np.zeros((rows, v.shape[1]), dtype=np.int64)
    rescales = np.zeros(rows, dtype=np.int64)
    for t0 in range(0, kv_rows, fmt.kv_tile):
        cols = slice(t0, min(t0 + fmt.kv_tile, kv_rows))
        e, rise, state = softmax_tile(cfg, fmt, y[:, cols], valid[:, cols], state)
        rescales += (rise > 0)
        acc = round_shift(acc, rise[:, None]) + e @ v[cols]
    m, lsum, started = state.row_max, state.row_sum, state.started

    recip, lead = row_reciprocal(lsum, R)
    out = tile_output(cfg, fmt, acc, recip, lead, started, rq)
    if trace:
        norm = normalize_acc(acc, recip, lead, R, B, G)
        return out, TiledTrace(row_max=m, row_sum=lsum, out_acc=acc, rescales=rescales,
                               norm_acc=np.where(started[:, None], norm, 0))
    return out


def attend_rows(cfg: AttentionConfig, scores, v, valid, exp_mult: int, exp_shift: int,
                rq: Requant):
    """The whole-row path on the same inputs (``softmax_int``, ``P V``, requantize), for
    comparison: what ``attention_int`` computes per head."""
    from .softmax import softmax_int
    from .fixed import requantize

    probs = softmax_int(scores, cfg, exp_mult, exp_shift, valid)
    return requantize(probs @ as_int64(v), rq, cfg.act_bits)
