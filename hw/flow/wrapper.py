"""Registered I/O wrapper around ``attention_top`` for synthesis and place-and-route figures.

:class:`SynthWrapper` exists so that the whole top can be placed and routed on a real package
without a pin file (``hw/flow/synth.py``, ``make synth``) and so that every path that touches a
pin is register to register: the timing nextpnr reports is then the timing of the accelerator,
not of unconstrained pad paths. It is **not** part of the IP; users instantiate
``attention_top`` itself.

Two I/O modes:

``full``
    The wrapper has exactly the ports of ``attention_top`` (same names and widths). Every AXI
    channel (AXI4-Lite AW, W, B, AR, R; AXI4-Stream in and out) passes through two
    :class:`RegisterSlice` in series, the usual fully registered AXI register slice (a
    two-entry skid buffer): ``valid``, the payload and ``ready`` leave the wrapper straight
    from flip-flops, and every input reaches a flip-flop through at most one multiplexer.
    Two slices, because without a pin file nextpnr puts the pins on the die's edge, often far
    from the blocks they serve (the register block sits by the core it drives): the first
    slice stays by the pins, the second by the top, and the crossing between them gets a
    cycle of its own instead of sharing one with the top's first logic (``slices=1`` gives
    the single-slice wrapper). Stream semantics are kept exactly (lossless, in order, one
    beat per cycle sustained); each channel gains one cycle of latency per slice. ``irq`` is
    registered once, ``rst`` too (the core sees a reset one cycle later). Pins, ``clk`` and
    ``rst`` included: 191 for ``configs/default.toml``, 189 for ``configs/tiny.toml`` (its
    AXI4-Lite addresses, write and read, are one bit narrower).
``narrow``
    For packages with fewer pins (iCE40 UP5K SG48: 39). The handshake pins (``*valid``,
    ``*ready``), ``irq``, ``clk`` and ``rst`` stay as in ``full``, with the same register
    slices; the payload inputs of all input channels (addresses, write data and strobes,
    stream data and ``tlast``) come from one shift register loaded through ``sdi`` while
    ``shift`` is high, and each output channel's payload is XOR-reduced into one registered
    pin (``b_x``, ``r_x``, ``m_axis_x``). Every payload bit still reaches or leaves a pin
    (shift register in, XOR out), so synthesis cannot remove any logic of the top; but the
    payload is no longer a usable bus: this mode is for resource and timing figures only.
"""

from __future__ import annotations

from amaranth.hdl import (Cat, ClockDomain, ClockSignal, DomainRenamer, Module, ResetSignal,
                          Shape, Signal)
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.blocks.register_slice import RegisterSlice

__all__ = ["RegisterSlice", "SynthWrapper", "CHANNELS", "IO_MODES"]

IO_MODES = ("full", "narrow")

# (channel, direction relative to the top: "in" = the top receives it, valid, ready, payload)
CHANNELS = (
    ("aw", "in", "s_axi_awvalid", "s_axi_awready", ("s_axi_awaddr",)),
    ("w", "in", "s_axi_wvalid", "s_axi_wready", ("s_axi_wdata", "s_axi_wstrb")),
    ("b", "out", "s_axi_bvalid", "s_axi_bready", ("s_axi_bresp",)),
    ("ar", "in", "s_axi_arvalid", "s_axi_arready", ("s_axi_araddr",)),
    ("r", "out", "s_axi_rvalid", "s_axi_rready", ("s_axi_rdata", "s_axi_rresp")),
    ("s_axis", "in", "s_axis_tvalid", "s_axis_tready", ("s_axis_tdata", "s_axis_tlast")),
    ("m_axis", "out", "m_axis_tvalid", "m_axis_tready", ("m_axis_tdata", "m_axis_tlast")),
)
_PLAIN_OUTPUTS = ("irq",)


def _width(member) -> int:
    return Shape.cast(member.shape).width


class SynthWrapper(wiring.Component):
    """``top`` (an ``attention_top``-like component) with registered I/O; see module docstring.

    Parameters
    ----------
    top : wiring.Component
        Must have exactly the ports named in :data:`CHANNELS` plus ``irq``.
    io : "full" or "narrow"
    slices : int
        Register slices in series on every channel, 1 or 2 (2).
    """

    def __init__(self, top: wiring.Component, io: str = "full", slices: int = 2):
        if io not in IO_MODES:
            raise ValueError(f"io must be one of {IO_MODES}, not {io!r}")
        if slices not in (1, 2):
            raise ValueError(f"slices must be 1 or 2, not {slices!r}")
        self.slices = slices
        members = top.signature.members
        known = {p for _, _, v, r, pay in CHANNELS for p in (v, r, *pay)} | set(_PLAIN_OUTPUTS)
        if set(members) != known:
            raise ValueError(f"SynthWrapper does not know the top's ports "
                             f"{sorted(set(members) ^ known)}")
        self._top = top
        self.io = io
        ports = {}
        for name, direction, valid, ready, payload in CHANNELS:
            to_top = direction == "in"
            ports[valid] = In(1) if to_top else Out(1)
            ports[ready] = Out(1) if to_top else In(1)
            if io == "full":
                for p in payload:
                    ports[p] = In(_width(members[p])) if to_top else Out(_width(members[p]))
            elif not to_top:
                ports[f"{name}_x"] = Out(1)
        if io == "narrow":
            ports.update({"sdi": In(1), "shift": In(1)})
        for p in _PLAIN_OUTPUTS:
            ports[p] = Out(_width(members[p]))
        super().__init__(ports)

    @property
    def shift_bits(self) -> int:
        """Length of the payload shift register of ``narrow`` mode (0 in ``full``)."""
        if self.io == "full":
            return 0
        members = self._top.signature.members
        return sum(_width(members[p]) for _, d, _, _, pay in CHANNELS if d == "in" for p in pay)

    def register_bits(self) -> int:
        """Flip-flops the wrapper adds around the top (before any synthesis optimisation)."""
        members = self._top.signature.members
        bits = 1 + self.shift_bits                      # reset register, shift register
        for name, direction, _, _, payload in CHANNELS:
            width = sum(_width(members[p]) for p in payload)
            # per slice: out + skid data, out + skid valid, ready
            bits += self.slices * (2 * width + 3)
            if self.io == "narrow" and direction == "out":
                bits += 1
        return bits + sum(_width(members[p]) for p in _PLAIN_OUTPUTS)

    def elaborate(self, platform):
        m = Module()
        # Everything except the reset register runs in "core", whose reset is registered.
        rst_r = Signal(init=1, reset_less=True)
        m.d.sync += rst_r.eq(ResetSignal("sync"))
        m.domains.core = cd = ClockDomain("core", local=True)
        m.d.comb += [cd.clk.eq(ClockSignal("sync")), cd.rst.eq(rst_r)]
        core = DomainRenamer("core")
        top = self._top
        m.submodules.top = core(top)

        chain = None
        if self.io == "narrow":
            chain = Signal(self.shift_bits)
            with m.If(self.shift):
                m.d.core += chain.eq(Cat(chain[1:], self.sdi))
        offset = 0
        for name, direction, valid, ready, payload in CHANNELS:
            top_payload = Cat(*(getattr(top, p) for p in payload))
            width = len(top_payload)
            # rs_<name> by the pins; rs2_<name> (if two slices) by the top.
            rs = [RegisterSlice(stream.Signature(width)) for _ in range(self.slices)]
            for i, slice_ in enumerate(rs):
                m.submodules[f"rs{'' if i == 0 else i + 1}_{name}"] = core(slice_)
            for a, b in zip(rs, rs[1:]):
                if direction == "out":
                    a, b = b, a
                wiring.connect(m, a.o_stream, b.i_stream)
            pin_side = rs[0]
            top_side = rs[-1]
            if direction == "in":
                if self.io == "full":
                    src = Cat(*(getattr(self, p) for p in payload))
                else:
                    src = chain[offset:offset + width]
                    offset += width
                m.d.comb += [pin_side.i_stream.valid.eq(getattr(self, valid)),
                             pin_side.i_stream.payload.eq(src),
                             getattr(self, ready).eq(pin_side.i_stream.ready),
                             getattr(top, valid).eq(top_side.o_stream.valid),
                             top_payload.eq(top_side.o_stream.payload),
                             top_side.o_stream.ready.eq(getattr(top, ready))]
            else:
                m.d.comb += [top_side.i_stream.valid.eq(getattr(top, valid)),
                             top_side.i_stream.payload.eq(top_payload),
                             getattr(top, ready).eq(top_side.i_stream.ready),
                             getattr(self, valid).eq(pin_side.o_stream.valid),
                             pin_side.o_stream.ready.eq(getattr(self, ready))]
                if self.io == "full":
                    m.d.comb += Cat(*(getattr(self, p) for p in payload)).eq(pin_side.o_stream.payload)
                else:
                    m.d.core += getattr(self, f"{name}_x").eq(pin_side.o_stream.payload.xor())
        for p in _PLAIN_OUTPUTS:
            m.d.core += getattr(self, p).eq(getattr(top, p))
        return m
