"""Test vectors for the matrix engine: commands, operand beats in tile order, golden result rows.

Shared by the Amaranth unit tests and the cocotb tests (NumPy + golden, no simulator).
The tiling follows the MatmulEngine contract: tiles tm outer, tn inner, per tile one a/b beat
per kk, one bias beat per tile when bias is enabled, one result row per valid row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import Requant, matmul_acc, requantize
from golden.fixed import ChannelRequant, is_per_channel
from golden.config import AttentionConfig

__all__ = ["MatmulCase", "random_case", "extreme_case", "operand_beats", "expected_rows"]


@dataclass
class MatmulCase:
    a: np.ndarray          # (m, k)
    b: np.ndarray          # (k, n)
    bias: np.ndarray | None
    requant: Requant | ChannelRequant | None     # per-channel: the engine's ``channel``

    @property
    def shape(self):
        return self.a.shape[0], self.b.shape[1], self.a.shape[1]

    def command(self) -> dict:
        m, n, k = self.shape
        channel = is_per_channel(self.requant)
        rq = Requant(0, 1) if channel or self.requant is None else self.requant
        cmd = {"m": m, "n": n, "k": k, "bias_en": int(self.bias is not None),
               "requant_en": int(self.requant is not None), "mult": rq.mult, "shift": rq.shift}
        if channel:
            cmd["channel"] = 1
        return cmd


def random_case(cfg: AttentionConfig, rng: np.random.Generator, m: int, n: int, k: int, *,
                bias: bool, requant: bool, probs: bool | None = None,
                channel: bool = False) -> MatmulCase:
    """Random operands: A is int activations or, with ``probs``, UQ0.prob_bits probabilities.
    ``channel`` (with ``bias`` and ``requant``): a multiplier and shift per output column."""
    if probs is None:
        probs = bool(rng.integers(2))
    amax = 1 << (cfg.act_bits - 1)
    if probs:
        a = rng.integers(0, 1 << cfg.prob_bits, size=(m, k))
    else:
        a = rng.integers(-amax, amax, size=(m, k))
    wmax = 1 << (max(cfg.act_bits, cfg.weight_bits) - 1)
    b = rng.integers(-wmax, wmax, size=(k, n))
    bias_v = None
    if bias:
        peak = k * int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0))
        if requant:     # comparable to the sums, so the requantized values stay varied
            hi = min(max(1, 2 * peak), (1 << (cfg.bias_bits - 1)) - 1)
        else:           # the raw sum must fit acc_bits
            hi = min((1 << (cfg.acc_bits - 1)) - 1 - peak, (1 << (cfg.bias_bits - 1)) - 1)
        lo = -hi
        bias_v = rng.integers(lo, hi + 1, size=n)
    rq = None
    if requant:
        acc = matmul_acc(a, b, bias_v)
        peak = max(1, int(np.abs(acc).max()))
        mult = int(rng.integers(1 << (cfg.requant_mult_bits - 1), 1 << cfg.requant_mult_bits))
        # Aim the largest value near the int8 edge so both rounding and saturation occur.
        shift = (peak * mult).bit_length() - cfg.act_bits + int(rng.integers(-1, 3))
        rq = Requant(mult, int(min(62, max(1, shift))))
        if channel:
            top = 1 << cfg.requant_mult_bits
            mults = rng.integers(1, top, size=n)
            # per column near its own int8 edge, some columns far off (0 or saturated)
            peaks = np.maximum(1, np.abs(acc).max(axis=0))
            shifts = np.array([(int(p) * int(mu)).bit_length() - cfg.act_bits
                               + int(rng.integers(-2, 4)) for p, mu in zip(peaks, mults)])
            rq = ChannelRequant(mults.astype(np.int64),
                                np.clip(shifts, 1, 62).astype(np.int64))
    return MatmulCase(a=a, b=b, bias=bias_v, requant=rq)


def extreme_case(cfg: AttentionConfig, m: int, n: int, k: int, *, bias: bool,
                 requant: bool) -> MatmulCase:
    """Most negative operands everywhere (and the most negative bias): the largest sums."""
    amin = -(1 << (cfg.act_bits - 1))
    a = np.full((m, k), amin, dtype=np.int64)
    b = np.full((k, n), -(1 << (max(cfg.act_bits, cfg.weight_bits) - 1)), dtype=np.int64)
    bias_v = None
    if bias:
        lim = (1 << (cfg.bias_bits - 1)) if requant else cfg.projection_bias_limit
        bias_v = np.full(n, -lim, dtype=np.int64)
    rq = Requant((1 << cfg.requant_mult_bits) - 1, 20) if requant else None
    return MatmulCase(a=a, b=b, bias=bias_v, requant=rq)


def operand_beats(cfg: AttentionConfig, case: MatmulCase):
    """``(a_beats, b_beats, bias_beats)``: lists of per-beat lists of ints, in engine order."""
    R, C = cfg.array_rows, cfg.array_cols
    m, n, k = case.shape
    tm, tn = -(-m // R), -(-n // C)
    a = np.zeros((tm * R, k), dtype=np.int64)
    a[:m] = case.a
    b = np.zeros((k, tn * C), dtype=np.int64)
    b[:, :n] = case.b
    a_beats, b_beats, bias_beats = [], [], []
    for i in range(tm):
        for j in range(tn):
            a_beats.extend(a[i * R:(i + 1) * R, :].T.tolist())
            b_beats.extend(b[:, j * C:(j + 1) * C].tolist())
            if case.bias is not None:
                bias_beats.append(_bias_beat(cfg, case, j))
    return a_beats, b_beats, bias_beats


def _bias_beat(cfg: AttentionConfig, case: MatmulCase, j: int):
    """Column tile ``j``'s bias beat: a list of biases, or with ``cfg.channel_scales`` the
    engine's struct (the scales of a per-tensor product are not used: zeros)."""
    C, n = cfg.array_cols, case.shape[1]

    def tile(values):
        full = np.zeros(-(-n // C) * C, dtype=np.int64)
        full[:n] = values
        return full[j * C:(j + 1) * C].tolist()

    biases = tile(case.bias)
    if not cfg.channel_scales:
        return biases
    rq = case.requant
    if not is_per_channel(rq):
        return {"bias": biases, "mult": [0] * C, "shift_m1": [0] * C}
    return {"bias": biases, "mult": tile(rq.mult), "shift_m1": tile(rq.shift - 1)}


def expected_rows(cfg: AttentionConfig, case: MatmulCase) -> list[tuple]:
    """Golden result beats ``(row, col, last, data tuple)`` in engine order."""
    R, C = cfg.array_rows, cfg.array_cols
    m, n, k = case.shape
    acc = matmul_acc(case.a, case.b, case.bias)
    if case.requant is not None:
        out = requantize(acc, case.requant, cfg.act_bits)
    else:
        out = matmul_acc(case.a, case.b, case.bias, cfg.acc_bits)
    tm, tn = -(-m // R), -(-n // C)
    full = np.zeros((tm * R, tn * C), dtype=np.int64)
    full[:m, :n] = out
    rows = []
    for i in range(tm):
        for j in range(tn):
            for r in range(min(R, m - i * R)):
                row = i * R + r
                rows.append((row, j * C, 0, tuple(full[row, j * C:(j + 1) * C].tolist())))
    row, col, _, data = rows[-1]
    rows[-1] = (row, col, 1, data)
    return rows
