"""One delay line for the whole design: a value through a chain of registers."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["DelayLine"]


class DelayLine(wiring.Component):
    """``delayed`` is ``value`` of ``stages`` enabled cycles earlier.

    Parameters
    ----------
    shape : shape-like
        Of the value.
    stages : int
        Registers in the chain (0: ``delayed`` is ``value``).
    reset_less : bool
        Registers without reset, for a pure pipeline whose owner carries (and resets) the
        valid flags: the reset/flush net then stays small.

    Members
    -------
    value : ``In(shape)``
    delayed : ``Out(shape)``
    en : ``In(1, init=1)``
        The chain shifts in cycles with ``en`` (a pipeline's stall holds it).

    Latency: ``stages`` cycles with ``en``. Throughput: one value per cycle.
    """

    def __init__(self, shape, stages: int, *, reset_less: bool = False):
        if not isinstance(stages, int) or stages < 0:
            raise ValueError(f"stages must be an integer >= 0, not {stages!r}")
        self.stages, self.reset_less = stages, reset_less
        super().__init__({"value": In(shape), "delayed": Out(shape), "en": In(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        value = self.value
        for n in range(self.stages):
            reg = Signal.like(self.value, name=f"stage{n}", reset_less=self.reset_less)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            value = reg
        m.d.comb += self.delayed.eq(value)
        return m
