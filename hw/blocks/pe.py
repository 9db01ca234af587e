"""One processing element of the output-stationary systolic array."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.blocks.dsp import RegisteredMultiplier

__all__ = ["ProcessingElement"]


def _check_width(name: str, value, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} = {value!r} is out of range: allowed integers {lo}..{hi}")


class ProcessingElement(wiring.Component):
    """Multiply-accumulate cell with a stationary accumulator and a result register.

    Operand ``a`` (a row of A) and the tile flags enter from the west, operand ``b`` (a column
    of B) from the north; all three leave east/south through registers, so no signal is
    broadcast combinationally across a row or column. Every register updates only while ``en``
    is high (the array's global step enable: a stalled array holds its state).

    The multiply is a :class:`~hw.blocks.dsp.RegisteredMultiplier` (operand registers and product
    register: one DSP block with its own registers on ECP5) followed by one more product
    register in the fabric next to the accumulator (the route out of a DSP block can take most
    of a clock period on its own), so the product ``p`` of a beat is there three steps after
    the beat; the flags wait three steps with it (``first_d``/``last_d`` = the flags of
    ``p``). Per step::

        acc    <= (0 if first_d else acc) + p
        result <= (0 if first_d else acc) + p      when last_d

    so ``first`` restarts the accumulation of a new output element and ``last`` copies the
    finished sum into ``result``, which keeps it while the next tile accumulates (tiles are
    pipelined; ``result`` is overwritten only by the next tile's ``last``). A beat with both
    flags is a one-term sum (K = 1). Bubbles are beats with zero operands and no flags.

    Parameters
    ----------
    a_width, b_width : int
        Signed operand widths, 2..18 (one 18x18 hardware multiplier).
    acc_width : int
        Signed accumulator width, ``a_width + b_width - 1``..64; sums wrap modulo
        ``2**acc_width`` (the configuration sizes it so that no product of the layer wraps).

    Members
    -------
    en : In(1)
        Step enable.
    a_in, b_in : In(signed(a_width)), In(signed(b_width))
        Operands from the west and north neighbours.
    first_in, last_in : In(1)
        Tile flags travelling with ``a``.
    a_out, b_out, first_out, last_out : Out
        The inputs delayed by one step, to the east (``a``, flags) and south (``b``)
        neighbours.
    last_done : Out(1)
        ``last_in`` delayed by :attr:`latency` steps: high in the first step in which
        ``result`` holds the sum the ``last`` beat finished.
    result : Out(signed(acc_width))
        Finished sum of the latest tile.

    Latency: a beat at ``a_in``/``b_in`` in step ``s`` is in ``result`` from step ``s + 4``
    (``last`` beat). Throughput: one multiply-accumulate per step.
    """

    @staticmethod
    def check_widths(a_width: int, b_width: int, acc_width: int) -> None:
        """Raise ``ValueError`` naming the first width out of range."""
        _check_width("a_width", a_width, 2, 18)
        _check_width("b_width", b_width, 2, 18)
        _check_width("acc_width", acc_width, a_width + b_width - 1, 64)

    def __init__(self, a_width: int, b_width: int, acc_width: int):
        self.check_widths(a_width, b_width, acc_width)
        self.a_width, self.b_width, self.acc_width = a_width, b_width, acc_width
        super().__init__({
            "en": In(1),
            "a_in": In(signed(a_width)),
            "b_in": In(signed(b_width)),
            "first_in": In(1),
            "last_in": In(1),
            "a_out": Out(signed(a_width)),
            "b_out": Out(signed(b_width)),
            "first_out": Out(1),
            "last_out": Out(1),
            "last_done": Out(1),
            "result": Out(signed(acc_width)),
        })

    latency = 4
    """Steps from a ``last`` beat at the inputs to its sum in ``result``."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.mult = mult = RegisteredMultiplier(signed(self.a_width),
                                                        signed(self.b_width), fabric_reg=True)
        m.d.comb += [mult.en.eq(self.en), mult.a.eq(self.a_in), mult.b.eq(self.b_in)]
        # The flags of the product mult.p: first_out/last_out, two steps more.
        p = mult.p
        first_dd, last_dd = Signal(), Signal()
        first_d, last_d = Signal(), Signal()
        # The data registers have no reset (only the flags do): a sum starts from the first
        # flag, a result is read only after the last flag, and operands left in the array by
        # an abandoned tile leave it ahead of the next tile's first beat. Without reset they
        # stay off the engine's reset/flush net, which otherwise reaches every flip-flop.
        a_out = Signal(signed(self.a_width), reset_less=True)
        b_out = Signal(signed(self.b_width), reset_less=True)
        acc = Signal(signed(self.acc_width), reset_less=True)
        result = Signal(signed(self.acc_width), reset_less=True)
        m.d.comb += [self.a_out.eq(a_out), self.b_out.eq(b_out), self.result.eq(result)]
        total = Signal(signed(self.acc_width))
        m.d.comb += total.eq(Mux(first_d, 0, acc) + p)
        with m.If(self.en):
            m.d.sync += [
                a_out.eq(self.a_in),
                b_out.eq(self.b_in),
                self.first_out.eq(self.first_in),
                self.last_out.eq(self.last_in),
                first_dd.eq(self.first_out),
                last_dd.eq(self.last_out),
                first_d.eq(first_dd),
                last_d.eq(last_dd),
                self.last_done.eq(last_d),
                acc.eq(total),
            ]
            with m.If(last_d):
                m.d.sync += result.eq(total)
        return m
