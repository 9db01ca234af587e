"""Fixed-point base-2 exponential of the softmax: ``E = 2**-(diff * exp_mult * 2**-exp_shift)``.

Hardware counterpart of :func:`golden.softmax.softmax_exp` (steps 2-4 of the softmax method).
"""

from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig
from golden.softmax import exp_table

__all__ = ["Exp2Unit"]


class Exp2Unit(wiring.Component):
    """One lane of the softmax exponential, a fixed-latency pipeline without flow control.

    With ``F = cfg.exp_frac_bits``, ``T = cfg.exp_table_bits``, ``W = cfg.exp_bits``,
    ``L = cfg.exp_table_size`` and ``ib = cfg.exp_interp_bits``, the stages are

    1. ``prod = diff * exp_mult``
    2. ``prod >> (exp_shift - 1)``
    3. ``u = round_shift(prod, exp_shift)`` (ties up), ``n = min(u >> F, W + 2)``,
       ``f = u mod 2**F``
    4. ``t0, t1`` = entries ``f >> ib`` and ``(f >> ib) + 1`` of the (L+1)-entry UQ1.T table
    5. ``(t0 - t1) * (f mod 2**ib)``
    6. ``mant = t0 - round_shift((t0 - t1) * (f mod 2**ib), ib)``
    7. ``exp = round_shift(mant, n + T - W)``; a negative shift (``W > T``) is a left shift.

    Every stage is one register, so a ``diff`` presented at cycle t gives ``exp`` at cycle
    ``t + latency``, one result per cycle. There is no valid or enable: the owner carries its
    own valid and side data in a delay line of the same length.

    Parameters
    ----------
    cfg : AttentionConfig

    Members
    -------
    diff : In(unsigned(cfg.score_diff_bits))
        ``max(row) - score``, non-negative.
    exp_mult : In(unsigned(cfg.exp_mult_bits))
        Score-to-exponent multiplier (run-time, static while results are in flight).
    exp_shift : In(unsigned(6))
        Right shift of ``diff * exp_mult``; meaningful for 1..62 (0 yields garbage, which the
        softmax unit masks; see :class:`hw.softmax.SoftmaxUnit`).
    exp : Out(unsigned(cfg.exp_bits + 1))
        ``E`` as UQ1.W: ``2**W`` for ``diff = 0``, 0 once ``u >= (W + 2) * 2**F``.
    """

    LATENCY = 7

    def __init__(self, cfg: AttentionConfig):
        if not isinstance(cfg, AttentionConfig):
            raise TypeError(f"cfg must be an AttentionConfig, not {cfg!r}")
        self._cfg = cfg
        super().__init__({
            "diff": In(unsigned(cfg.score_diff_bits)),
            "exp_mult": In(unsigned(cfg.exp_mult_bits)),
            "exp_shift": In(unsigned(6)),
            "exp": Out(unsigned(cfg.exp_bits + 1)),
        })

    @property
    def latency(self) -> int:
        """Cycles from ``diff`` to ``exp``."""
        return self.LATENCY

    def elaborate(self, platform):
        cfg = self._cfg
        F, T, W = cfg.exp_frac_bits, cfg.exp_table_bits, cfg.exp_bits
        ib = cfg.exp_interp_bits
        n_max = W + 2
        m = Module()

        # 1. the product; its width covers the largest diff times the largest multiplier.
        prod = Signal(cfg.score_diff_bits + cfg.exp_mult_bits)
        m.d.sync += prod.eq(self.diff * self.exp_mult)

        # 2. round half up as ((x >> (s-1)) + 1) >> 1, which equals (x + 2**(s-1)) >> s for
        # s >= 1 and needs no variable-position bias constant. The barrel shift gets a stage
        # of its own (it was the critical path on ECP5 when followed by the add and clamp).
        scaled = Signal(len(prod))
        m.d.sync += scaled.eq(prod >> (self.exp_shift - 1)[:6])
        half = Signal(len(prod) + 1)
        m.d.comb += half.eq(scaled + 1)
        u = half[1:]
        n1 = Signal(range(n_max + 1))
        f1 = Signal(F)
        with m.If(u >= (n_max << F)):
            m.d.sync += n1.eq(n_max)
        with m.Else():
            m.d.sync += n1.eq(u >> F)
        m.d.sync += f1.eq(u[:F])

        # 4. table lookup: a ROM of L+1 constants (small, becomes LUTs).
        table = [int(v) for v in exp_table(cfg)]
        rom = Array(Const(v, T + 1) for v in table)
        idx = f1[ib:]
        t0, dt = Signal(T + 1), Signal(T + 1)
        frac2 = Signal(ib)
        n2 = Signal.like(n1)
        m.d.sync += [t0.eq(rom[idx]), dt.eq(rom[idx] - rom[idx + 1]), frac2.eq(f1[:ib]),
                     n2.eq(n1)]

        # 5./6. linear interpolation between t0 and t1 (t0 >= t1: the table decreases).
        mant = Signal(T + 1)
        n4 = Signal.like(n1)
        if ib:
            step = Signal(T + 1 + ib)
            t0_3, n3 = Signal.like(t0), Signal.like(n1)
            m.d.sync += [step.eq(dt * frac2), t0_3.eq(t0), n3.eq(n2)]
            m.d.sync += [mant.eq(t0_3 - ((step + (1 << (ib - 1))) >> ib)), n4.eq(n3)]
        else:
            # No interpolation bits: keep the stage count (and so the latency) the same.
            t0_3, n3 = Signal.like(t0), Signal.like(n1)
            m.d.sync += [t0_3.eq(t0), n3.eq(n2), mant.eq(t0_3), n4.eq(n3)]

        # 7. E = round_shift(mant, n + T - W). Pre-shifting mant left by K + 1 with
        # K = max(0, W - T) makes the right shift n + T - W + K + 1 >= 1 for every n, so the
        # same ((x >> (s-1)) + 1) >> 1 rounding applies; a negative n + T - W stays exact.
        K = max(0, W - T)
        wide = Signal(T + 1 + K + 1)
        m.d.comb += wide.eq(mant << (K + 1))
        shifted = Signal(len(wide) + 1)
        m.d.comb += shifted.eq((wide >> (n4 + (T - W + K))) + 1)
        m.d.sync += self.exp.eq(shifted[1:])
        return m
