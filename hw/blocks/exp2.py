"""Fixed-point base-2 exponential of the softmax: ``E = 2**-(diff * exp_mult * 2**-exp_shift)``.

Hardware counterpart of :func:`golden.softmax.softmax_exp` (steps 2-4 of the softmax method).
:class:`Exp2Unit` is the whole-row softmax's lane; its two halves are also components of their
own for the key/value-tiled softmax, which scales the scores before the running maximum and
exponentiates later at another output width: :class:`ExpScale` (the product and its shift,
stages 1-6) and :class:`Exp2Table` (table, interpolation and rounding, stages 8-15, the
golden :func:`golden.softmax.exp2_neg`).
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Shape, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig
from golden.softmax import exp_table

from hw.blocks.delay import DelayLine
from hw.blocks.dsp import RegisteredMultiplier, WideMultiplier

__all__ = ["Exp2Unit", "ExpScale", "Exp2Table"]


class Exp2Unit(wiring.Component):
    """One lane of the softmax exponential, a fixed-latency pipeline without flow control.

    With ``F = cfg.exp_frac_bits``, ``T = cfg.exp_table_bits``, ``W = cfg.exp_bits``,
    ``L = cfg.exp_table_size`` and ``ib = cfg.exp_interp_bits``, the stages are

    1. - 4. ``prod = diff * exp_mult`` (:class:`hw.blocks.dsp.WideMultiplier`: DSP operand and
       product registers, the products registered in the fabric, their sum)
    5. ``prod >> ((exp_shift - 1) & ~7)``
    6. ``>> ((exp_shift - 1) & 7)``
    7. ``u = round_shift(prod, exp_shift)`` (ties up), ``n = min(u >> F, W + 2)``,
       ``f = u mod 2**F``
    8. - 10. ``(t0 - t1) * (f mod 2**ib)`` (:class:`hw.blocks.dsp.RegisteredMultiplier` with its
       fabric product register; its operand register takes ``t0 - t1`` straight from a ROM of
       the table's differences), and ``t0``, entry ``f >> ib`` of the (L+1)-entry UQ1.T table
    11. ``round_shift((t0 - t1) * (f mod 2**ib), ib)``
    12. ``mant = t0 -`` that, and the shift ``n + T - W + K`` with ``K = max(0, W - T)``
    13. ``x = mant << (K + 1) >>`` the multiple-of-4 part of that shift
    14. ``>>`` the rest
    15. ``exp = (x + 1) >> 1``, i.e. ``round_shift(mant, n + T - W)``; a negative shift
        (``W > T``) is a left shift.

    Every stage is one register (no stage has more than one carry chain, or a multiplexer
    deeper than 8 ways, between registers; a DSP output only feeds a register), so a ``diff``
    presented at cycle t gives ``exp`` at cycle ``t + latency``, one result per cycle. There
    is no valid or enable: the owner carries its own valid and side data in a delay line of
    the same length. ``exp_shift - 1`` is taken through a register of its own (``exp_shift``
    is static while results are in flight).

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
        softmax unit masks; see :class:`hw.blocks.softmax.SoftmaxUnit`).
    exp : Out(unsigned(cfg.exp_bits + 1))
        ``E`` as UQ1.W: ``2**W`` for ``diff = 0``, 0 once ``u >= (W + 2) * 2**F``.
    """

    LATENCY = 15

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
        F, W = cfg.exp_frac_bits, cfg.exp_bits
        n_max = W + 2
        m = Module()
        # No register here has a reset: the unit is a pure pipeline whose owner carries the
        # valid flags (and resets them), and the flush net stays small.

        # 1.-6. the product and its shift by exp_shift - 1.
        scaled = scale_stages(m, cfg, self.diff, self.exp_mult, self.exp_shift)

        # 7. u = (scaled + 1) >> 1, and u >= n_max * 2**F iff scaled >= 2 n_max 2**F - 1:
        # the comparison runs in parallel with the increment.
        half = Signal(len(scaled) + 1, reset_less=True)
        m.d.comb += half.eq(scaled + 1)
        u = half[1:]
        big = Signal(reset_less=True)
        m.d.comb += big.eq(scaled >= (n_max << (F + 1)) - 1)
        n1 = Signal(range(n_max + 1), reset_less=True)
        f1 = Signal(F, reset_less=True)
        with m.If(big):
            m.d.sync += n1.eq(n_max)
        with m.Else():
            m.d.sync += n1.eq(u >> F)
        m.d.sync += f1.eq(u[:F])

        # 8.-15. the table, the interpolation and the final rounding shift.
        m.d.sync += self.exp.eq(table_stages(m, cfg, W, n1, f1))
        return m


class Exp2Table(wiring.Component):
    """``2**-(n + f / 2**F)`` rounded to ``frac_bits`` fraction bits: stages 8-15 of
    :class:`Exp2Unit`, a fixed-latency pipeline without flow control (:attr:`LATENCY` = 8).

    With ``T = cfg.exp_table_bits``, ``L = cfg.exp_table_size``, ``ib = cfg.exp_interp_bits``
    and ``W = frac_bits``: the table entry ``t0`` at ``f >> ib`` and the interpolation
    ``mant = t0 - round_shift((t0 - t1) * (f mod 2**ib), ib)`` (UQ1.T), then
    ``exp = round_shift(mant, n + T - W)`` (UQ1.W; a negative shift is a left shift). This is
    :func:`golden.softmax.exp2_neg` for ``u = n * 2**F + f`` with ``n`` already capped at
    ``W + 2`` (every larger ``n`` gives 0 as well). The whole-row softmax uses ``W =
    cfg.exp_bits``; the key/value-tiled softmax its unnormalized-probability width.

    Members
    -------
    n : In(range(frac_bits + 3))
        Integer part of the exponent, ``min(u >> F, W + 2)``.
    f : In(unsigned(cfg.exp_frac_bits))
        Fraction part, ``u mod 2**F``.
    exp : Out(unsigned(frac_bits + 1))
        UQ1.W; ``2**W`` for ``n = f = 0``.

    The caller presents ``n`` and ``f`` from registers; ``exp`` follows :attr:`LATENCY` cycles
    later, one result per cycle.
    """

    LATENCY = 8

    def __init__(self, cfg: AttentionConfig, frac_bits: int):
        if not isinstance(cfg, AttentionConfig):
            raise TypeError(f"cfg must be an AttentionConfig, not {cfg!r}")
        if not 1 <= frac_bits <= 30:
            raise ValueError(f"frac_bits = {frac_bits} is out of range: allowed 1..30")
        self._cfg, self.frac_bits = cfg, frac_bits
        super().__init__({
            "n": In(range(frac_bits + 3)),
            "f": In(unsigned(cfg.exp_frac_bits)),
            "exp": Out(unsigned(frac_bits + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.exp.eq(table_stages(m, self._cfg, self.frac_bits, self.n, self.f))
        return m


class ExpScale(wiring.Component):
    """``x * exp_mult >> (exp_shift - 1)``: stages 1-6 of :class:`Exp2Unit`, a fixed-latency
    pipeline without flow control (:attr:`LATENCY` = 6).

    The caller finishes the rounding: ``(scaled + 1) >> 1`` is ``round_shift(x * exp_mult,
    exp_shift)`` (ties up) for ``exp_shift >= 1``. The whole-row softmax scales ``max -
    score`` (unsigned); the key/value-tiled softmax scales the scores themselves (signed; the
    shift is then arithmetic).

    Members
    -------
    x : In(x_shape)
    exp_mult : In(unsigned(cfg.exp_mult_bits))
    exp_shift : In(unsigned(6))
        Meaningful for 1..62 (0 yields garbage, which the owner masks).
    scaled : Out(Shape(x_shape.width + cfg.exp_mult_bits, x_shape.signed))
    """

    LATENCY = 6

    def __init__(self, cfg: AttentionConfig, x_shape):
        if not isinstance(cfg, AttentionConfig):
            raise TypeError(f"cfg must be an AttentionConfig, not {cfg!r}")
        self._cfg, self.x_shape = cfg, Shape.cast(x_shape)
        super().__init__({
            "x": In(self.x_shape),
            "exp_mult": In(unsigned(cfg.exp_mult_bits)),
            "exp_shift": In(unsigned(6)),
            "scaled": Out(Shape(self.x_shape.width + cfg.exp_mult_bits, self.x_shape.signed)),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.scaled.eq(scale_stages(m, self._cfg, self.x, self.exp_mult,
                                                self.exp_shift))
        return m


# The stages as functions that build into the caller's module, so that Exp2Unit (and with it
# the whole-row softmax's netlist, which placement seeds are measured on) keeps its flat
# hierarchy while ExpScale and Exp2Table reuse the same code.

def _delay(m, value, stages, name):
    """``value`` through ``stages`` registers."""
    m.submodules[f"{name}_delay"] = line = DelayLine(value.shape(), stages, reset_less=True)
    m.d.comb += line.value.eq(value)
    return line.delayed


def scale_stages(m, cfg: AttentionConfig, x, exp_mult, exp_shift):
    """Stages 1-6 into ``m``: returns the register ``x * exp_mult >> (exp_shift - 1)``."""
    # 1.-4. the product; its width covers the largest x times the largest multiplier.
    m.submodules.mult = mult = WideMultiplier(x.shape(), unsigned(cfg.exp_mult_bits))
    m.d.comb += [mult.en.eq(1), mult.a.eq(x), mult.b.eq(exp_mult)]
    prod = _delay(m, mult.p, 4 - mult.latency, "prod_pad")   # one block: latency 3

    # 5./6. round half up as ((x >> (s-1)) + 1) >> 1, which equals (x + 2**(s-1)) >> s for
    # s >= 1 and needs no variable-position bias constant. The barrel shift is split into
    # a shift by the multiple of 8 and one by the rest.
    shift_m1 = Signal(6, reset_less=True)
    m.d.sync += shift_m1.eq(exp_shift - 1)
    coarse = Signal.like(prod, reset_less=True)
    scaled = Signal.like(prod, reset_less=True)
    m.d.sync += [coarse.eq(prod >> Cat(Const(0, 3), shift_m1[3:])),
                 scaled.eq(coarse >> shift_m1[:3])]
    return scaled


def table_stages(m, cfg: AttentionConfig, W: int, n1, f1):
    """Stages 8-14 into ``m`` from the registers ``n1``, ``f1``: returns the value whose
    register is stage 15, ``round_shift(mant, n + T - W)`` (UQ1.W)."""
    T, ib = cfg.exp_table_bits, cfg.exp_interp_bits
    n_max = W + 2

    # 8.-10. table lookups (ROMs of L constants, small: LUTs) and the interpolation product.
    table = [int(v) for v in exp_table(cfg)]
    L = len(table) - 1
    rom = Array(Const(table[i], T + 1) for i in range(L))
    idx = f1[ib:]
    t0_8 = Signal(T + 1, reset_less=True)
    m.d.sync += t0_8.eq(rom[idx])
    interp_latency = RegisteredMultiplier.latency_for(fabric_reg=True)
    t0_10 = _delay(m, t0_8, interp_latency - 1, "t0")
    n10 = _delay(m, n1, interp_latency, "n")
    if ib:
        # An entry's width, or where that is more than one multiplier operand (the 23-bit
        # entries of prob_bits > 8), the steps' own: they are far smaller than the entries
        # (at most 18 bits, cfg.exp_step_bits, checked by the configuration).
        steps = [table[i] - table[i + 1] for i in range(L)]
        dt_bits = T + 1 if T + 1 <= 18 else cfg.exp_step_bits
        assert max(steps).bit_length() <= dt_bits
        dt_rom = Array(Const(v, dt_bits) for v in steps)
        m.submodules.interp = interp = RegisteredMultiplier(unsigned(dt_bits), unsigned(ib),
                                                            fabric_reg=True)
        m.d.comb += [interp.en.eq(1), interp.a.eq(dt_rom[idx]), interp.b.eq(f1[:ib])]
        # 11./12. mant = t0 - round_shift(step, ib)
        rstep = Signal(T + 1, reset_less=True)
        m.d.sync += rstep.eq((interp.p + (1 << (ib - 1))) >> ib)
    else:
        # No interpolation bits: keep the stage count (and so the latency) the same.
        rstep = Const(0, T + 1)
    t0_11 = _delay(m, t0_10, 1, "t0_11")
    n11 = _delay(m, n10, 1, "n_11")
    mant = Signal(T + 1, reset_less=True)
    m.d.sync += mant.eq(t0_11 - rstep)

    # 12.-15. E = round_shift(mant, n + T - W). Pre-shifting mant left by K + 1 with
    # K = max(0, W - T) makes the right shift n + T - W + K + 1 >= 1 for every n, so the
    # same ((x >> (s-1)) + 1) >> 1 rounding applies; a negative n + T - W stays exact.
    K = max(0, W - T)
    amount = Signal(range(n_max + T - W + K + 1), reset_less=True)
    m.d.sync += amount.eq(n11 + (T - W + K))
    wide = Signal(T + 1 + K + 1, reset_less=True)
    m.d.comb += wide.eq(mant << (K + 1))
    part = Signal(len(wide), reset_less=True)
    fine = Signal(2, reset_less=True)
    shifted = Signal(len(wide), reset_less=True)
    m.d.sync += [part.eq(wide >> Cat(Const(0, 2), amount[2:])), fine.eq(amount[:2]),
                 shifted.eq(part >> fine)]
    rounded = Signal(len(wide) + 1, reset_less=True)
    m.d.comb += rounded.eq(shifted + 1)
    return rounded[1:]
