"""One processing element of the output-stationary systolic array."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

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

    Per step, with ``p`` the registered product of the previous step's operands::

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
    result : Out(signed(acc_width))
        Finished sum of the latest tile.

    Latency: a beat at ``a_in``/``b_in`` in step ``s`` is in ``result`` from step ``s + 2``
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
            "result": Out(signed(acc_width)),
        })

    latency = 2
    """Steps from a ``last`` beat at the inputs to its sum in ``result``."""

    def elaborate(self, platform):
        m = Module()
        # The product register sits between the multiplier and the adder (it maps into the
        # DSP's output register); first_out/last_out double as its flag pipeline.
        product = Signal(signed(self.a_width + self.b_width))
        acc = Signal(signed(self.acc_width))
        total = Signal(signed(self.acc_width))
        m.d.comb += total.eq(Mux(self.first_out, 0, acc) + product)
        with m.If(self.en):
            m.d.sync += [
                self.a_out.eq(self.a_in),
                self.b_out.eq(self.b_in),
                self.first_out.eq(self.first_in),
                self.last_out.eq(self.last_in),
                product.eq(self.a_in * self.b_in),
                acc.eq(total),
            ]
            with m.If(self.last_out):
                m.d.sync += self.result.eq(total)
        return m
