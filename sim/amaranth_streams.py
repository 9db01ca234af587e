"""Stream drivers for Amaranth-simulator testbenches (``amaranth.lib.stream`` ports).

- :func:`stream_put` / :func:`stream_get`: one transfer each, in the style of Glasgow's gateware
  tests; ``valid`` is held with a stable payload until ``ready``.
- :class:`StreamProducer` / :class:`StreamConsumer`: testbenches that send a list of payloads /
  collect payloads, with random idle cycles / backpressure drawn from ``random.Random(seed)``,
  and record the cycle of every transfer so tests can check exact timing.
- :func:`simulate`: one clock, critical and background testbenches.

Cycles are counted in clock ticks from the start of the simulation: a transfer at the n-th
active edge (0-based) is cycle n. Every testbench starts at time 0, so the cycles recorded by
different producers and consumers of one simulation compare directly.

A payload is anything ``ctx.set`` accepts for the port: an int, a layout constant, or a dict
for a struct payload (e.g. ``{"data": word, "last": 1}``).
"""

from __future__ import annotations

import random
from collections import deque
from typing import Iterable

from amaranth.sim import Simulator

__all__ = ["stream_put", "stream_get", "StreamProducer", "StreamConsumer", "simulate"]


def _probability(name: str, p: float) -> float:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name} = {p!r} is out of range: allowed 0 <= {name} < 1")
    return p


async def stream_put(ctx, stream, payload) -> None:
    """Offer ``payload`` on ``stream`` until it is taken (returns after that clock edge)."""
    ctx.set(stream.payload, payload)
    ctx.set(stream.valid, 1)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream):
    """Take one payload from ``stream`` (returns after the clock edge of the transfer)."""
    ctx.set(stream.ready, 1)
    payload, = await ctx.tick().sample(stream.payload).until(stream.valid)
    ctx.set(stream.ready, 0)
    return payload


class StreamProducer:
    """Sends payloads on ``stream`` with random idle cycles.

    Before each payload the producer stays idle (``valid`` low) for a cycle with probability
    ``idle``, repeatedly; once ``valid`` is high it stays high, with the payload unchanged,
    until the transfer. With ``idle`` 0 the payloads go back to back.

    ``testbench`` returns when the queue is empty, or, with ``forever``, keeps waiting for
    :meth:`put` from another testbench (add it as a background testbench then).

    Records ``accepted`` (cycle of every transfer) and ``refused`` (cycles with ``valid``
    high and ``ready`` low); ``pending`` counts payloads not yet taken.
    """

    def __init__(self, stream, payloads: Iterable = (), *, idle: float = 0.0, seed: int = 0,
                 forever: bool = False):
        self.stream = stream
        self.idle = _probability("idle", idle)
        self.rng = random.Random(seed)
        self.forever = forever
        self.queue = deque(payloads)
        self.accepted: list[int] = []
        self.refused: list[int] = []
        self.cycle = 0

    @property
    def pending(self) -> int:
        return len(self.queue)

    def put(self, payloads: Iterable) -> None:
        self.queue.extend(payloads)

    async def testbench(self, ctx):
        stream = self.stream
        while self.queue or self.forever:
            if not self.queue:
                await ctx.tick()
                self.cycle += 1
                continue
            # Draw only when idling is possible: with idle 0 the seed does not matter.
            if self.idle and self.rng.random() < self.idle:
                await ctx.tick()
                self.cycle += 1
                continue
            ctx.set(stream.payload, self.queue[0])
            ctx.set(stream.valid, 1)
            while True:
                _, _, ready = await ctx.tick().sample(stream.ready)
                self.cycle += 1
                if ready:
                    break
                self.refused.append(self.cycle - 1)
            self.accepted.append(self.cycle - 1)
            self.queue.popleft()
            # Lowered for the next payload's idle draw; raised again in the same instant
            # when there is none, so back-to-back payloads keep valid high.
            ctx.set(stream.valid, 0)


class StreamConsumer:
    """Collects payloads from ``stream`` with random backpressure.

    In every cycle ``ready`` is low with probability ``backpressure``. Collects ``count``
    payloads (``None``: until the simulation ends; add it as a background testbench then),
    then ``linger`` more cycles with ``ready`` high, collecting anything that still arrives, so
    a test that compares ``items`` with the expected list also catches extra transfers.
    Raises ``AssertionError`` after ``max_cycles`` cycles in all.

    Records ``items`` (payloads, converted by ``convert`` when given; Amaranth returns a
    struct payload as a view whose fields read as attributes) and ``cycles`` (cycle of every
    transfer).
    """

    def __init__(self, stream, count: int | None = None, *, backpressure: float = 0.0,
                 seed: int = 1, linger: int = 0, max_cycles: int | None = None,
                 convert=None):
        self.stream = stream
        self.count = count
        self.backpressure = _probability("backpressure", backpressure)
        self.rng = random.Random(seed)
        self.linger = linger
        self.max_cycles = max_cycles
        self.convert = convert
        self.items: list = []
        self.cycles: list[int] = []
        self.cycle = 0

    def _ready(self) -> bool:
        return not (self.backpressure and self.rng.random() < self.backpressure)

    async def _step(self, ctx, ready: bool) -> None:
        ctx.set(self.stream.ready, ready)
        _, _, valid, payload = await ctx.tick().sample(self.stream.valid, self.stream.payload)
        if valid and ready:
            self.items.append(self.convert(payload) if self.convert else payload)
            self.cycles.append(self.cycle)
        self.cycle += 1
        if self.max_cycles is not None and self.cycle >= self.max_cycles:
            raise AssertionError(f"{len(self.items)} of {self.count} payloads after "
                                 f"max_cycles = {self.max_cycles}: the design hung")

    async def testbench(self, ctx):
        while self.count is None or len(self.items) < self.count:
            await self._step(ctx, self._ready())
        for _ in range(self.linger):
            await self._step(ctx, True)
        ctx.set(self.stream.ready, 0)


def simulate(top, *testbenches, background=(), period: float = 1e-8) -> None:
    """Run ``top`` with one clock until every testbench in ``testbenches`` has returned.

    ``background`` testbenches (e.g. producers with ``forever``, monitors) run alongside and
    are dropped when the others finish. Each entry is an async function of ``ctx`` or an
    object with a ``testbench`` method.
    """
    sim = Simulator(top)
    sim.add_clock(period)
    for tb in testbenches:
        sim.add_testbench(getattr(tb, "testbench", tb))
    for tb in background:
        sim.add_testbench(getattr(tb, "testbench", tb), background=True)
    sim.run()
