"""A fully registered valid/ready register slice (two-entry skid buffer) on a stream.

Used inside the IP on the core's result stream (:mod:`hw.core.streamer`) and, several in
series, on every channel of the synthesis wrapper (:mod:`hw.flow.wrapper`).
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RegisterSlice"]


class RegisterSlice(wiring.Component):
    """Fully registered valid/ready slice (two-entry skid buffer) of a stream.

    Parameters
    ----------
    signature : stream.Signature
        The stream's signature (its payload shape is what the slice stores).

    Members
    -------
    i_stream : ``In(signature)``
        The receiving side; ``ready`` is a flip-flop.
    o_stream : ``Out(signature)``
        The sending side; ``valid`` and ``payload`` are flip-flops.

    ``i_stream.valid``, ``i_stream.payload`` and ``o_stream.ready`` go to flip-flops through one multiplexer level,
    so no combinational path crosses the slice: that is what it is for (a route across the
    die, or out of the IP, gets a cycle of its own). A beat is taken on ``i_stream``'s
    handshake and offered until ``o_stream``'s; order and count are preserved.
    Latency: one cycle. Throughput: one beat per cycle.
    """

    def __init__(self, signature: stream.Signature):
        if not isinstance(signature, stream.Signature):
            raise TypeError(f"RegisterSlice needs a stream.Signature, not {signature!r}")
        super().__init__({"i_stream": In(signature), "o_stream": Out(signature)})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i_stream, self.o_stream
        skid_valid = Signal()
        skid_data = Signal.like(i.payload)
        ready = Signal(init=1)              # registered copy of ~skid_valid
        skid_next = Signal()
        load_out = ~o.valid | o.ready
        take = i.valid & ready
        with m.If(load_out):
            m.d.comb += skid_next.eq(0)
            with m.If(skid_valid):
                m.d.sync += [o.valid.eq(1), o.payload.eq(skid_data)]
            with m.Else():
                m.d.sync += [o.valid.eq(i.valid), o.payload.eq(i.payload)]
        with m.Else():
            m.d.comb += skid_next.eq(skid_valid | take)
            with m.If(take):
                m.d.sync += skid_data.eq(i.payload)
        m.d.sync += [skid_valid.eq(skid_next), ready.eq(~skid_next)]
        m.d.comb += i.ready.eq(ready)
        return m
