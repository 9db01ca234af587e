"""Pipelined reciprocal of the softmax row sum: ``recip = floor(2**(lead + R) / sum)``.

Restoring division, one quotient bit per pipeline stage. Pipelined rather than iterative because
the softmax unit finishes one row per ``ceil(N / lanes)`` cycles and rows may be one beat long:
an iterative divider (R + 1 cycles per row) would throttle every row shorter than R + 1 beats,
while the pipelined one costs R + 1 subtractors of ``sum_bits + 1`` bits (a few hundred LUTs)
and keeps one row per cycle for any row length.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ReciprocalDivider"]


class ReciprocalDivider(wiring.Component):
    """``lead = floor(log2(sum))`` and ``recip = floor(2**(lead + R) / sum)``.

    The sum is first normalised, ``norm = sum << (S - 1 - lead)`` (S = ``sum_bits``), which
    leaves the quotient unchanged: ``recip = floor(2**(S - 1 + R) / norm)``, an (R+1)-bit
    restoring division with ``2**(R-1) <= recip <= 2**R`` for every ``sum > 0``. For ``sum = 0``
    the outputs are ``lead = 0`` and ``recip = 2**(R+1) - 1`` (callers that can see a zero sum
    must not depend on them; the softmax unit's exponentials are then all zero).

    Fixed latency, no flow control: ``i_valid``/``i_sum``/``i_tag`` at cycle t appear as
    ``o_valid``/``o_recip``/``o_lead``/``o_tag`` at ``t + latency``; one division per cycle.

    Parameters
    ----------
    sum_bits : int
        Width S of the unsigned dividend ``sum``, 1..60.
    recip_bits : int
        R, 1..24: the reciprocal has R + 1 bits.
    tag_width : int
        Width of side data carried along unchanged, 0..64.

    Members
    -------
    i_valid : In(1)
    i_sum : In(unsigned(sum_bits))
    i_tag : In(unsigned(tag_width))
    o_valid : Out(1)
    o_recip : Out(unsigned(recip_bits + 1))
    o_lead : Out(range(sum_bits))
    o_tag : Out(unsigned(tag_width))
    """

    def __init__(self, sum_bits: int, recip_bits: int, tag_width: int = 0):
        for name, value, lo, hi in (("sum_bits", sum_bits, 1, 60),
                                    ("recip_bits", recip_bits, 1, 24),
                                    ("tag_width", tag_width, 0, 64)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an integer, not {value!r}")
            if not lo <= value <= hi:
                raise ValueError(f"{name} = {value} is out of range: allowed {lo}..{hi}")
        self._sum_bits = sum_bits
        self._recip_bits = recip_bits
        self._tag_width = tag_width
        super().__init__({
            "i_valid": In(1),
            "i_sum": In(unsigned(sum_bits)),
            "i_tag": In(unsigned(tag_width)),
            "o_valid": Out(1),
            "o_recip": Out(unsigned(recip_bits + 1)),
            "o_lead": Out(range(sum_bits)),
            "o_tag": Out(unsigned(tag_width)),
        })

    @staticmethod
    def latency_for(recip_bits: int) -> int:
        """Cycles from input to output: input register, leading-one detection, normalisation
        (two shift stages), R + 1 steps."""
        return recip_bits + 5

    @property
    def latency(self) -> int:
        return self.latency_for(self._recip_bits)

    def elaborate(self, platform):
        S, R = self._sum_bits, self._recip_bits
        m = Module()

        # Stage 1: input register (the sum arrives straight from the row accumulator's adder).
        # Only the valid flags have a reset: the data registers (no reset) stay off the
        # reset/flush net, and nothing reads them without their valid flag.
        RL = dict(reset_less=True)
        v0, tag0, sum0 = Signal(), Signal(self._tag_width, **RL), Signal(S, **RL)
        m.d.sync += [v0.eq(self.i_valid), tag0.eq(self.i_tag), sum0.eq(self.i_sum)]

        # Stage 2: leading zeros above the highest set bit, as a log-depth tree (S - 1 for
        # sum = 0, where lead = 0).
        valid, tag = Signal(), Signal(self._tag_width, **RL)
        total, norm_shift = Signal(S, **RL), Signal(range(S), **RL)
        m.d.sync += [valid.eq(v0), tag.eq(tag0), total.eq(sum0),
                     norm_shift.eq(_leading_zeros(m, sum0))]

        # Stages 3, 4: normalise so the divisor's top bit is bit S-1 (shift by the multiple of
        # 4 of the distance, then by the rest); lead = S - 1 - that distance.
        v2a, tag2a, lead2a = Signal(), Signal(self._tag_width, **RL), Signal(range(S), **RL)
        coarse, fine = Signal(S, **RL), Signal(2, **RL)
        m.d.sync += [v2a.eq(valid), tag2a.eq(tag), lead2a.eq(S - 1 - norm_shift),
                     coarse.eq(total << Cat(Const(0, 2), norm_shift[2:])),
                     fine.eq(norm_shift[:2])]
        v2, tag2, lead2 = Signal(), Signal(self._tag_width, **RL), Signal(range(S), **RL)
        divisor = Signal(S, **RL)
        m.d.sync += [v2.eq(v2a), tag2.eq(tag2a), lead2.eq(lead2a),
                     divisor.eq(coarse << fine)]

        # Stages 5..R+5: one quotient bit each, most significant first. The partial remainder
        # starts at 2**(S-1) <= divisor and stays below 2 * divisor, so it needs S + 1 bits;
        # the comparison is the borrow of the subtraction (one carry chain per stage).
        quot = None
        v, t, ld, d = v2, tag2, lead2, divisor
        rem_c = Const(1 << (S - 1), S + 1)
        for step in range(R + 1):
            diff = Signal(S + 2, name=f"diff{step}")
            m.d.comb += diff.eq(rem_c - d)
            ge = ~diff[S + 1]
            nrem = Signal(S + 1, name=f"rem{step}", **RL)
            nquot = Signal(step + 1, name=f"quot{step}", **RL)
            nv, nt = Signal(name=f"v{step}"), Signal(self._tag_width, name=f"tag{step}", **RL)
            nld = Signal(range(S), name=f"lead{step}", **RL)
            nd = Signal(S, name=f"div{step}", **RL)
            if step < R:  # the last remainder and divisor are not needed
                with m.If(ge):
                    m.d.sync += nrem.eq(diff[:S] << 1)
                with m.Else():
                    m.d.sync += nrem.eq(rem_c << 1)
                m.d.sync += nd.eq(d)
            if step == 0:
                m.d.sync += nquot.eq(ge)
            else:
                m.d.sync += nquot.eq((quot << 1) | ge)
            m.d.sync += [nv.eq(v), nt.eq(t), nld.eq(ld)]
            rem_c, quot, v, t, ld, d = nrem, nquot, nv, nt, nld, nd

        m.d.comb += [self.o_valid.eq(v), self.o_recip.eq(quot), self.o_lead.eq(ld),
                     self.o_tag.eq(t)]
        return m


def _leading_zeros(m, value):
    """Number of zeros above the highest set bit of ``value`` (``len(value) - 1`` if it is
    zero), as a balanced tree of 2-way merges (depth log2 of the width)."""
    def tree(v):
        # (any bit set, zeros above the highest one, or width - 1 if none)
        width = len(v)
        if width == 1:
            return v[0], Const(0, 1)
        half = width - (1 << ((width - 1).bit_length() - 1))   # bits above a power of 2
        hi_any, hi_lz = tree(v[width - half:])
        lo_any, lo_lz = tree(v[:width - half])
        lz = Signal((width - 1).bit_length(), name=f"lz_{width}")
        m.d.comb += lz.eq(Mux(hi_any, hi_lz, half + lo_lz))
        return hi_any | lo_any, lz
    return tree(value)[1]
