"""A multiplier with registered inputs and a registered product: one hardware DSP multiplier.

:class:`RegisteredMultiplier` is the only place in the design that multiplies two run-time
values wider than a few bits. Its pipeline (input registers, product register) is the one of
the FPGA multiplier blocks, so a synthesis tool can put the whole thing, registers included,
into one block:

- elaborated for a platform whose ``family`` is ``"ecp5"`` (an Amaranth ``LatticePlatform``
  for an ECP5 device, or :data:`ECP5`, the marker the synthesis scripts pass), it is one
  ``MULT18X18D`` instance with ``REG_INPUTA``, ``REG_INPUTB`` and ``REG_OUTPUT`` clocked by
  ``CLK0`` and enabled by ``CE0`` (no reset, no pipeline register). nextpnr-ecp5 then times the
  block as register to register (``MULT18X18D_REGS_ALL``) instead of a combinational path of
  about 4 ns between fabric flip-flops;
- otherwise (simulation, Verilog generation, other targets) it is the behavioural equivalent:
  two operand registers and a product register, all without reset (as the hardware block's
  registers are used here), updating while ``en`` is high. Yosys maps the multiply to a
  combinational DSP block between these flip-flops, which nextpnr can place next to it.

Both forms compute exactly the same thing cycle for cycle; no caller depends on the value of
these registers after reset (each owner carries its own valid/flag pipeline, which does reset).
"""

from __future__ import annotations

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Shape, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RegisteredMultiplier", "ECP5", "is_ecp5"]


class _Target:
    """Marker platform for ``rtlil.convert(..., platform=ECP5)``: only ``family`` is read."""

    def __init__(self, family: str):
        self.family = family

    def __repr__(self):
        return f"<synthesis target {self.family}>"


ECP5 = _Target("ecp5")
"""Pass as ``platform`` to ``amaranth.back.rtlil.convert`` (or ``verilog.convert``) to get
``MULT18X18D`` instances with their registers enabled."""


def is_ecp5(platform) -> bool:
    return getattr(platform, "family", None) == "ecp5"


class RegisteredMultiplier(wiring.Component):
    """``p = a * b`` two (or three) enabled steps after ``a``, ``b`` are presented.

    Per enabled step (``en`` high at a clock edge)::

        a_r <= a;  b_r <= b;  p_dsp <= a_r * b_r;  [p <= p_dsp]

    so operands present in step ``s`` give their product in ``p`` in step ``s + latency``
    (counting enabled steps): 2, or 3 with ``fabric_reg``, which registers the product once
    more in the fabric. That register is what the product's consumer should see: the route out
    of a DSP block to logic placed elsewhere can take most of a clock period by itself (measured
    5 ns on the ECP5-85F), so a DSP output should feed a flip-flop and nothing else. No reset:
    the registers hold whatever they last captured.

    Parameters
    ----------
    a_shape, b_shape : Shape
        Operand shapes, at most 18 bits each (one 18 x 18 multiplier block); signed or
        unsigned independently.
    fabric_reg : bool
        Register the product once more outside the DSP block.

    Members
    -------
    en : In(1)
    a : In(a_shape)
    b : In(b_shape)
    p : Out(signed/unsigned(a_width + b_width))
        The exact product (signed if either operand is).
    """

    MAX_WIDTH = 18

    @staticmethod
    def latency_for(fabric_reg: bool) -> int:
        """Enabled steps from ``a``/``b`` to ``p``."""
        return 2 + bool(fabric_reg)

    def __init__(self, a_shape, b_shape, *, fabric_reg: bool = False):
        a_shape, b_shape = Shape.cast(a_shape), Shape.cast(b_shape)
        for name, shape in (("a", a_shape), ("b", b_shape)):
            if not 1 <= shape.width <= self.MAX_WIDTH:
                raise ValueError(f"{name} width = {shape.width} is out of range: allowed "
                                 f"1..{self.MAX_WIDTH}")
        self.a_shape, self.b_shape = a_shape, b_shape
        self.fabric_reg = bool(fabric_reg)
        self.latency = self.latency_for(fabric_reg)
        p_shape = Shape(a_shape.width + b_shape.width, a_shape.signed or b_shape.signed)
        super().__init__({"en": In(1), "a": In(a_shape), "b": In(b_shape), "p": Out(p_shape)})

    def elaborate(self, platform):
        m = Module()
        p_dsp = Signal.like(self.p, reset_less=True)
        if is_ecp5(platform):
            self._ecp5(m, p_dsp)
        else:
            a_r = Signal(self.a_shape, reset_less=True)
            b_r = Signal(self.b_shape, reset_less=True)
            with m.If(self.en):
                m.d.sync += [a_r.eq(self.a), b_r.eq(self.b), p_dsp.eq(a_r * b_r)]
        if self.fabric_reg:
            p_fab = Signal.like(self.p, reset_less=True)
            with m.If(self.en):
                m.d.sync += p_fab.eq(p_dsp)
            m.d.comb += self.p.eq(p_fab)
        else:
            m.d.comb += self.p.eq(p_dsp)
        return m

    def _ecp5(self, m, p_dsp):
        # 18-bit operands, sign- or zero-extended as their shape says; SIGNEDA/SIGNEDB tell the
        # block how to read bit 17. The 36-bit product holds every a * b exactly.
        a18 = Signal(18)
        b18 = Signal(18)
        p36 = Signal(36)
        m.d.comb += [a18.eq(self.a), b18.eq(self.b), p_dsp.eq(p36)]
        ports = {}
        # As Yosys's own MULT18X18D mapping: C tied low, the cascade inputs (SRIA/SRIB, only
        # reachable from a neighbouring block) and the unused clock/enable/reset pins (all the
        # resets: the registers have none) left unconnected.
        for i in range(18):
            ports[f"i_A{i}"] = a18[i]
            ports[f"i_B{i}"] = b18[i]
            ports[f"i_C{i}"] = Const(0, 1)
        for i in range(36):
            ports[f"o_P{i}"] = p36[i]
        ports.update(i_CLK0=ClockSignal("sync"), i_CE0=self.en)
        m.submodules.mult = Instance(
            "MULT18X18D",
            p_REG_INPUTA_CLK="CLK0", p_REG_INPUTA_CE="CE0", p_REG_INPUTA_RST="RST0",
            p_REG_INPUTB_CLK="CLK0", p_REG_INPUTB_CE="CE0", p_REG_INPUTB_RST="RST0",
            p_REG_INPUTC_CLK="NONE",
            p_REG_PIPELINE_CLK="NONE",
            p_REG_OUTPUT_CLK="CLK0", p_REG_OUTPUT_CE="CE0", p_REG_OUTPUT_RST="RST0",
            p_GSR="DISABLED", p_RESETMODE="SYNC",
            i_SIGNEDA=Const(int(self.a_shape.signed), 1),
            i_SIGNEDB=Const(int(self.b_shape.signed), 1),
            i_SOURCEA=Const(0, 1), i_SOURCEB=Const(0, 1),
            **ports)


class WideMultiplier(wiring.Component):
    """``p = a * b`` for operands of any width, from :class:`RegisteredMultiplier` blocks.

    Each operand is cut into 17-bit unsigned chunks from the bottom, the last (top) chunk taking
    up to 18 bits and the operand's signedness; every pair of chunks is one
    :class:`RegisteredMultiplier` (one DSP block), and a register after them sums the shifted
    partial products. An operand of at most 18 bits is a single chunk, so an ``18 x 18``
    product is one block, ``33 x 16`` two. Every block's product is registered once more in the
    fabric (``fabric_reg``) before anything uses it.

    Per enabled step, operands present in step ``s`` give ``p`` in step ``s + latency``:
    4, or 3 when both operands fit one block (no partial products to sum).

    Parameters
    ----------
    a_shape, b_shape : Shape

    Members
    -------
    en : In(1)
    a : In(a_shape)
    b : In(b_shape)
    p : Out(Shape(a_width + b_width, signed if either is))
    """

    def __init__(self, a_shape, b_shape):
        a_shape, b_shape = Shape.cast(a_shape), Shape.cast(b_shape)
        self.a_shape, self.b_shape = a_shape, b_shape
        self.latency = self.latency_for(a_shape, b_shape)
        p_shape = Shape(a_shape.width + b_shape.width, a_shape.signed or b_shape.signed)
        super().__init__({"en": In(1), "a": In(a_shape), "b": In(b_shape), "p": Out(p_shape)})

    @staticmethod
    def chunks(shape: Shape) -> list[tuple[int, int, bool]]:
        """``(offset, width, signed)`` of each chunk of an operand of ``shape``."""
        out, lo, width = [], 0, shape.width
        while width - lo > RegisteredMultiplier.MAX_WIDTH:
            out.append((lo, 17, False))
            lo += 17
        out.append((lo, width - lo, shape.signed))
        return out

    @classmethod
    def blocks_for(cls, a_shape, b_shape) -> int:
        """Number of DSP blocks for these operand shapes."""
        return len(cls.chunks(Shape.cast(a_shape))) * len(cls.chunks(Shape.cast(b_shape)))

    @classmethod
    def latency_for(cls, a_shape, b_shape) -> int:
        """Enabled steps from the operands to ``p`` for these operand shapes."""
        return (RegisteredMultiplier.latency_for(True)
                + (cls.blocks_for(a_shape, b_shape) > 1))

    @property
    def blocks(self) -> int:
        """Number of DSP blocks."""
        return self.blocks_for(self.a_shape, self.b_shape)

    def elaborate(self, platform):
        m = Module()
        terms = []
        for i, (ao, aw, asg) in enumerate(self.chunks(self.a_shape)):
            for j, (bo, bw, bsg) in enumerate(self.chunks(self.b_shape)):
                mult = RegisteredMultiplier(Shape(aw, asg), Shape(bw, bsg), fabric_reg=True)
                m.submodules[f"mult_{i}_{j}"] = mult
                m.d.comb += [mult.en.eq(self.en),
                             mult.a.eq(self.a.as_unsigned()[ao:ao + aw]),
                             mult.b.eq(self.b.as_unsigned()[bo:bo + bw])]
                terms.append((mult.p, ao + bo))
        if len(terms) == 1:
            m.d.comb += self.p.eq(terms[0][0])
            return m
        # The lowest term alone covers the bits below the next offset: no adder there.
        terms.sort(key=lambda t: t[1])
        (low, low_offset), rest = terms[0], terms[1:]
        split = min(offset for _, offset in rest) if low_offset == 0 else 0
        total = low >> split
        for value, offset in rest:
            total = total + (value << (offset - split))
        p = Signal.like(self.p, reset_less=True)    # no reset, like the blocks' registers
        m.d.comb += self.p.eq(p)
        with m.If(self.en):
            m.d.sync += p.eq(Cat(low[:split], total) if split else total)
        return m
