"""Generic cocotb drivers for Amaranth ``stream`` ports (payload/valid/ready), cocotb 2.x.

Amaranth flattens a stream port ``x`` to ``x__payload``, ``x__valid`` and ``x__ready``.

- :class:`StreamSource` offers queued payloads (ints) with a random idle probability; once
  ``valid`` is raised it holds the payload until the handshake.
- :class:`StreamSink` drives ``ready`` low with a backpressure probability and collects
  ``(cycle, payload)`` of every handshake.
- :func:`run_streams` clocks any number of them with two simulator waits per cycle for all of
  them together (drive after the falling edge, sample in the read-only phase before the
  rising edge), which keeps Python's per-cycle work small.
- :func:`pack_fields`, :func:`pack_array`, :func:`unpack_array` convert payload integers.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Callable, Iterable, Sequence

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge

__all__ = ["clock_and_reset", "StreamSource", "StreamSink", "run_streams", "pack_fields", "pack_array",
           "unpack_array", "to_signed"]


def to_signed(value: int, width: int) -> int:
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


def pack_fields(fields: Sequence[tuple[str, int, int]], values: dict) -> int:
    """Pack ``values[name]`` into ``(name, offset, width)`` bit fields (two's complement)."""
    word = 0
    for name, offset, width in fields:
        word |= (int(values[name]) & ((1 << width) - 1)) << offset
    return word


def pack_array(values: Iterable[int], width: int) -> int:
    """Element ``i`` at bits ``i*width`` (Amaranth ``ArrayLayout`` order)."""
    word = 0
    mask = (1 << width) - 1
    for i, v in enumerate(values):
        word |= (int(v) & mask) << (i * width)
    return word


def unpack_array(word: int, width: int, count: int, signed: bool = True) -> list[int]:
    mask = (1 << width) - 1
    out = [(word >> (i * width)) & mask for i in range(count)]
    return [to_signed(v, width) for v in out] if signed else out


class StreamSource:
    """Drives ``<prefix>__valid``/``__payload`` of ``dut`` from a queue of integers."""

    def __init__(self, dut, prefix: str, *, idle: float = 0.0, seed: int = 0):
        if not 0.0 <= idle < 1.0:
            raise ValueError(f"idle = {idle!r} is out of range: allowed 0 <= idle < 1")
        self.valid = getattr(dut, f"{prefix}__valid")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.idle = idle
        self.rng = random.Random(seed)
        self.queue: deque[int] = deque()
        self.offering = False
        self.accepted: list[int] = []    # cycle of each handshake
        self.valid.value = 0

    def send(self, items: Iterable[int]) -> None:
        self.queue.extend(int(x) for x in items)

    @property
    def idle_now(self) -> bool:
        return not self.queue and not self.offering

    def drive(self) -> None:
        if not self.offering and self.queue and self.rng.random() >= self.idle:
            self.offering = True
            self.payload.value = self.queue[0]
        self.valid.value = int(self.offering)

    def sample(self, cycle: int) -> None:
        if self.offering and self.ready.value:
            self.queue.popleft()
            self.offering = False
            self.accepted.append(cycle)


class StreamSink:
    """Drives ``<prefix>__ready`` of ``dut`` and collects ``(cycle, payload)`` handshakes."""

    def __init__(self, dut, prefix: str, *, backpressure: float = 0.0, seed: int = 0):
        if not 0.0 <= backpressure < 1.0:
            raise ValueError(f"backpressure = {backpressure!r} is out of range: "
                             f"allowed 0 <= backpressure < 1")
        self.valid = getattr(dut, f"{prefix}__valid")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.backpressure = backpressure
        self.rng = random.Random(seed)
        self.items: list[tuple[int, int]] = []
        self._ready = False
        self.ready.value = 0

    def drive(self) -> None:
        self._ready = self.rng.random() >= self.backpressure
        self.ready.value = int(self._ready)

    def sample(self, cycle: int) -> None:
        if self._ready and self.valid.value:
            self.items.append((cycle, int(self.payload.value)))


async def run_streams(clk, endpoints: Sequence, *, until: Callable[[], bool],
                      max_cycles: int, watch: Callable[[int], None] | None = None) -> int:
    """Clock ``endpoints`` (sources and sinks) until ``until()`` is true; returns the cycle.

    ``watch(cycle)`` runs in the read-only phase of every cycle (e.g. to sample a strobe).
    Raises ``TimeoutError`` after ``max_cycles``.
    """
    for cycle in range(max_cycles):
        await FallingEdge(clk)
        for e in endpoints:
            e.drive()
        await ReadOnly()
        for e in endpoints:
            e.sample(cycle)
        if watch is not None:
            watch(cycle)
        if until():
            return cycle
    raise TimeoutError(f"streams still busy after max_cycles = {max_cycles}")


async def clock_and_reset(dut, period_ns: int = 10, cycles: int = 2) -> None:
    """Start ``dut.clk`` and hold the synchronous ``dut.rst`` for ``cycles`` cycles."""
    cocotb.start_soon(Clock(dut.clk, period_ns, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
