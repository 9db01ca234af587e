"""Fixed-point tanh of the additive (Bahdanau) scoring path: ``t = tanh(a 2**-10)`` as S0.7.

Hardware twin of :func:`golden.additive.tanh_int` (docs/numerics.md, "Additive scoring").
"""

from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from golden.additive import (TANH_ARG_FRAC, TANH_ARG_MAX, TANH_BITS, TANH_TABLE_BITS,
                             TANH_TABLE_SIZE, tanh_table)

from hw.blocks.delay import DelayLine
from hw.blocks.dsp import RegisteredMultiplier

__all__ = ["TanhUnit"]


class TanhUnit(wiring.Component):
    """``lanes`` tanh evaluations per cycle, a fixed-latency pipeline without flow control.

    For an argument code ``a`` (signed, ``TANH_ARG_FRAC`` = 10 fraction bits): odd symmetry
    (the magnitude is evaluated, the sign applied last, so ``t(-a) = -t(a)`` exactly); for
    ``|a| < 8`` the table of ``TANH_TABLE_SIZE + 1`` = 65 entries ``round(tanh(i / 8)
    2**11)``, linearly interpolated over the low 7 bits (``t0 + round_shift((t1 - t0) f,
    7)``); for ``|a| >= 8`` the last entry; then ``min(round_shift(., 4), 127)``. Output
    S0.7, -127..127.

    Stages (each one register): 1. ``|a|``, its sign; 2. table index, fraction, beyond-range
    flag; 3. ``t0`` and ``t1 - t0`` from ROMs of 64 constants (LUTs); 4.-6. the interpolation
    product (:class:`hw.blocks.dsp.RegisteredMultiplier` with its fabric register, 12 x 7
    bits); 7. ``t0 +`` its rounding, or the last entry; 8. the rounding to S0.7 and the clamp;
    9. the sign. An argument presented at cycle ``c`` gives ``t`` at ``c + LATENCY``, one result
    per lane per cycle; the owner carries valid flags and side data in a delay line of the
    same length.

    The argument is :func:`golden.additive.tanh_arg` of ``z = q + k`` with the run's
    ``tanh_mult``/``tanh_shift``; the additive scorer (:mod:`hw.blocks.additive`) forms it
    while it fills its tables.

    Parameters
    ----------
    lanes : int
        Arguments per cycle (1..64).
    arg_bits : int
        Width of an argument code (signed), 14..32; codes beyond ``+-8`` all give ``+-127``.

    Members
    -------
    a : In(ArrayLayout(signed(arg_bits), lanes))
    t : Out(ArrayLayout(signed(TANH_BITS + 1), lanes))
    """

    LATENCY = 9

    def __init__(self, lanes: int = 1, arg_bits: int = 25):
        if not isinstance(lanes, int) or not 1 <= lanes <= 64:
            raise ValueError(f"lanes = {lanes!r} is out of range: allowed 1..64")
        # |a| < 8 * 2**10 must be representable, with the sign: at least 14 bits.
        if not isinstance(arg_bits, int) or not 14 <= arg_bits <= 32:
            raise ValueError(f"arg_bits = {arg_bits!r} is out of range: allowed 14..32")
        self.lanes, self.arg_bits = lanes, arg_bits
        super().__init__({
            "a": In(data.ArrayLayout(signed(arg_bits), lanes)),
            "t": Out(data.ArrayLayout(signed(TANH_BITS + 1), lanes)),
        })

    def elaborate(self, platform):
        m = Module()
        for lane in range(self.lanes):
            self._lane(m, self.a[lane], self.t[lane], lane)
        return m

    def _lane(self, m, a, t, lane):
        T, out_bits = TANH_TABLE_BITS, TANH_BITS
        size, frac = TANH_TABLE_SIZE, TANH_ARG_FRAC
        ib = frac + TANH_ARG_MAX.bit_length() - 1 - (size.bit_length() - 1)    # 7
        limit = TANH_ARG_MAX << frac
        table = [int(v) for v in tanh_table()]

        def reg(shape, name, value):
            r = Signal(shape, name=f"{name}{lane}", reset_less=True)
            m.d.sync += r.eq(value)
            return r

        def delay(value, stages, name):
            m.submodules[f"{name}{lane}_delay"] = line = DelayLine(value.shape(), stages,
                                                                    reset_less=True)
            m.d.comb += line.value.eq(value)
            return line.delayed

        # 1. magnitude and sign
        neg1 = reg(1, "neg", a < 0)
        mag1 = reg(unsigned(self.arg_bits), "mag", Mux(a < 0, -a, a))
        # 2. index and fraction; beyond the table (|a| >= 8): no carry chain, the bits above
        big2 = reg(1, "big", mag1[(limit.bit_length() - 1):].any())
        idx2 = reg(unsigned(size.bit_length() - 1), "idx", mag1[ib:limit.bit_length() - 1])
        f2 = reg(unsigned(ib), "frac", mag1[:ib])
        # 3. t0 and t1 - t0 from ROMs (the differences are positive: tanh rises)
        rom0 = Array(Const(table[i], T + 1) for i in range(size))
        romd = Array(Const(table[i + 1] - table[i], T + 1) for i in range(size))
        t0_3 = reg(unsigned(T + 1), "t0_", rom0[idx2])
        d3 = reg(unsigned(T + 1), "dt", romd[idx2])
        f3 = reg(unsigned(ib), "f3_", f2)
        # 4.-6. (t1 - t0) * f
        m.submodules[f"interp{lane}"] = mul = RegisteredMultiplier(unsigned(T + 1),
                                                                   unsigned(ib),
                                                                   fabric_reg=True)
        m.d.comb += [mul.en.eq(1), mul.a.eq(d3), mul.b.eq(f3)]
        lat = mul.latency
        t0_6 = delay(t0_3, lat, "t0_d")
        big6 = delay(delay(big2, 1, "big_a"), lat, "big_d")
        neg6 = delay(delay(neg1, 2, "neg_a"), lat, "neg_d")
        # 7. the interpolated value, or the last entry beyond the table
        val7 = reg(unsigned(T + 1), "val",
                   Mux(big6, table[size], t0_6 + ((mul.p + (1 << (ib - 1))) >> ib)))
        neg7 = reg(1, "neg7_", neg6)
        # 8. round to S0.7 and clamp; 9. the sign (three carry chains in one stage ran at
        # about 99 MHz)
        sh = T - out_bits
        r8 = Signal(unsigned(T + 1), name=f"r{lane}")
        m.d.comb += r8.eq((val7 + (1 << (sh - 1))) >> sh)
        top = (1 << out_bits) - 1
        mag8 = reg(unsigned(out_bits), "mag8_", Mux(r8 > top, top, r8))
        neg8 = reg(1, "neg8_", neg7)
        m.d.sync += t.eq(Mux(neg8, -mag8, mag8))
        assert 2 + 1 + lat + 1 + 2 == self.LATENCY, "stage count"
