"""Pipelined reciprocal of the softmax row sum: ``recip = floor(2**(lead + R) / sum)``.

Restoring division, one quotient bit per pipeline stage. Pipelined rather than iterative because
the softmax unit finishes one row per ``ceil(N / lanes)`` cycles and rows may be one beat long:
an iterative divider (R + 1 cycles per row) would throttle every row shorter than R + 1 beats,
while the pipelined one costs R + 1 subtractors of ``sum_bits + 1`` bits (a few hundred LUTs)
and keeps one row per cycle for any row length.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, unsigned
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
        """Cycles from input to output: leading-one detection, normalisation, R + 1 steps."""
        return recip_bits + 3

    @property
    def latency(self) -> int:
        return self.latency_for(self._recip_bits)

    def elaborate(self, platform):
        S, R = self._sum_bits, self._recip_bits
        m = Module()

        # Stage 1: leading one (the last matching If wins, so the highest set bit).
        valid, tag = Signal(), Signal(self._tag_width)
        total, lead, norm_shift = Signal(S), Signal(range(S)), Signal(range(S))
        lead_c, shift_c = Signal(range(S)), Signal(range(S))
        for i in range(S):
            with m.If(self.i_sum[i]):
                m.d.comb += [lead_c.eq(i), shift_c.eq(S - 1 - i)]
        m.d.sync += [valid.eq(self.i_valid), tag.eq(self.i_tag), total.eq(self.i_sum),
                     lead.eq(lead_c), norm_shift.eq(shift_c)]

        # Stage 2: normalise so the divisor's top bit is bit S-1.
        v2, tag2, lead2 = Signal(), Signal(self._tag_width), Signal(range(S))
        divisor = Signal(S)
        m.d.sync += [v2.eq(valid), tag2.eq(tag), lead2.eq(lead),
                     divisor.eq(total << norm_shift)]

        # Stages 3..R+3: one quotient bit each, most significant first. The partial remainder
        # starts at 2**(S-1) <= divisor and stays below 2 * divisor, so it needs S + 1 bits.
        quot = None
        v, t, ld, d = v2, tag2, lead2, divisor
        rem_c = 1 << (S - 1)
        for step in range(R + 1):
            ge = Signal(name=f"ge{step}")
            m.d.comb += ge.eq(rem_c >= d)
            nrem = Signal(S + 1, name=f"rem{step}")
            nquot = Signal(step + 1, name=f"quot{step}")
            nv, nt = Signal(name=f"v{step}"), Signal(self._tag_width, name=f"tag{step}")
            nld, nd = Signal(range(S), name=f"lead{step}"), Signal(S, name=f"div{step}")
            if step < R:  # the last remainder and divisor are not needed
                with m.If(ge):
                    m.d.sync += nrem.eq((rem_c - d) << 1)
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
