"""A fully registered valid/ready register slice (two-entry skid buffer).

Used inside the IP on the core's result stream (``hw.core.attention_core``) and, several in series,
on every channel of the synthesis wrapper (``hw.flow.wrapper``).
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RegisterSlice"]


class RegisterSlice(wiring.Component):
    """Fully registered valid/ready slice (two-entry skid buffer).

    ``i_*`` is the receiving side, ``o_*`` the sending side. ``i_ready``, ``o_valid`` and
    ``o_data`` are flip-flop outputs; ``i_valid``, ``i_data`` and ``o_ready`` go to flip-flops
    through one multiplexer level. A beat is taken when ``i_valid & i_ready`` and offered until
    ``o_valid & o_ready``; order and count are preserved, throughput is one beat per cycle.
    """

    def __init__(self, width: int):
        self.width = width
        super().__init__({
            "i_valid": In(1), "i_data": In(width), "i_ready": Out(1),
            "o_valid": Out(1), "o_data": Out(width), "o_ready": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        skid_valid = Signal()
        skid_data = Signal(self.width)
        ready = Signal(init=1)              # registered copy of ~skid_valid
        skid_next = Signal()
        load_out = ~self.o_valid | self.o_ready
        take = self.i_valid & ready
        with m.If(load_out):
            m.d.comb += skid_next.eq(0)
            with m.If(skid_valid):
                m.d.sync += [self.o_valid.eq(1), self.o_data.eq(skid_data)]
            with m.Else():
                m.d.sync += [self.o_valid.eq(self.i_valid), self.o_data.eq(self.i_data)]
        with m.Else():
            m.d.comb += skid_next.eq(skid_valid | take)
            with m.If(take):
                m.d.sync += skid_data.eq(self.i_data)
        m.d.sync += [skid_valid.eq(skid_next), ready.eq(~skid_next)]
        m.d.comb += self.i_ready.eq(ready)
        return m
