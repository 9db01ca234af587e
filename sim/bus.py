"""cocotb bus models (cocotb 2.x). Every cocotb testbench of the project drives the design
through this module.

- AXI: cocotbext-axi's models, which thousands of designs use, behind small adapters.
  :class:`AxiLiteMaster` (32-bit register reads and writes with response codes, time-outs)
  and :class:`AxiStreamWords` (packets of 32-bit words, TLAST on the last). Idle cycles and
  backpressure are cocotbext-axi pause generators (:func:`pause_generator`: paused with a
  probability in each cycle, from ``random.Random(seed)``). The AXI rules are checked by the
  passive :class:`sim.axi_monitor.AxiMonitor`, not by these models.
- Block streams: :class:`StreamSource` / :class:`StreamSink` drive an Amaranth ``stream``
  port of a block under test (``<prefix>__payload``, ``__valid``, ``__ready``) and
  :func:`run_streams` clocks any number of them together, recording the cycle of every
  transfer (``StreamSource.accepted``, ``StreamSink.items``), which the cycle-model checks
  of the matrix engine and softmax unit need; these ports are not AXI, and cocotbext-axi's
  stream models record no cycles, hence these ~100 lines. They drive after the falling edge
  and sample in the read-only phase before the rising edge, so they see each handshake as
  the design does, in Icarus and Verilator alike. The source leaves ``valid`` low with
  probability ``idle`` between payloads (a raised ``valid`` is held, payload unchanged,
  until taken); the sink drives ``ready`` low with probability ``backpressure``.
- :func:`clock_and_reset`; payload packing: :func:`pack_fields`, :func:`pack_array`,
  :func:`unpack_array`, :func:`pack_rows`, :func:`unpack_words`.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from typing import Callable, Iterable, Iterator, Sequence

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, First, Lock, ReadOnly, RisingEdge

__all__ = ["clock_and_reset", "StreamSource", "StreamSink", "run_streams",
           "AxiLiteMaster", "AxiLiteProtocolError", "AxiStreamWords", "pause_generator",
           "RESP_NAMES", "OKAY", "SLVERR",
           "pack_fields", "pack_array", "unpack_array", "to_signed", "pack_rows",
           "unpack_words"]


def _probability(name: str, p: float) -> float:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name} = {p!r} is out of range: allowed 0 <= {name} < 1")
    return p


# ---------------------------------------------------------------------------- payloads

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


def pack_rows(rows, bits: int = 8) -> list[int]:
    """:func:`sim.host.pack_rows` as a list of ints (the cocotb stream source's words)."""
    from sim.host import pack_rows as pack
    return [int(w) for w in pack(rows, bits)]


def unpack_words(words, width: int, bits: int = 8) -> list[list[int]]:
    """:func:`sim.host.unpack_words` as lists of ints."""
    from sim.host import unpack_words as unpack
    return unpack(list(words), width, bits).tolist()


# ---------------------------------------------------------------------------- clock, reset

async def clock_and_reset(dut, period_ns: int = 10, cycles: int = 2) -> None:
    """Start ``dut.clk`` and hold the synchronous ``dut.rst`` for ``cycles`` cycles."""
    cocotb.start_soon(Clock(dut.clk, period_ns, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


# ---------------------------------------------------------------------------- block streams

class _StreamPort:
    """The signals of Amaranth stream port ``prefix`` of ``dut`` (flattened to
    ``<prefix>__payload``, ``__valid``, ``__ready``)."""

    def __init__(self, dut, prefix: str, clk):
        if getattr(dut, prefix + "__valid", None) is None:
            raise AttributeError(f"no stream {prefix} in {dut._name}: no {prefix}__valid")
        self.payload = getattr(dut, prefix + "__payload")
        self.valid = getattr(dut, prefix + "__valid")
        self.ready = getattr(dut, prefix + "__ready")
        self.clk = dut.clk if clk is None else clk


class StreamSource(_StreamPort):
    """Drives ``valid``/``payload`` of one stream port from a queue."""

    def __init__(self, dut, prefix: str, *, clk=None, idle: float = 0.0, seed: int = 0):
        super().__init__(dut, prefix, clk)
        self.idle = _probability("idle", idle)
        self.rng = random.Random(seed)
        self.queue: deque[int] = deque()
        self.offering = False
        self.accepted: list[int] = []    # run_streams cycle of each transfer
        self.valid.value = 0
        self.payload.value = 0

    def put(self, items: Iterable[int]) -> None:
        """Queue ``items``."""
        self.queue.extend(int(x) for x in items)

    @property
    def idle_now(self) -> bool:
        return not self.queue and not self.offering

    def drive(self) -> None:
        """After the falling edge: raise ``valid`` with the next payload unless idle."""
        if not self.offering and self.queue and not (self.idle
                                                     and self.rng.random() < self.idle):
            self.offering = True
            self.payload.value = self.queue[0]
        self.valid.value = int(self.offering)

    def sample(self, cycle: int) -> bool:
        """In the read-only phase: True (and the payload leaves the queue) on a transfer."""
        if self.offering and self.ready.value:
            self.queue.popleft()
            self.offering = False
            self.accepted.append(cycle)
            return True
        return False


class StreamSink(_StreamPort):
    """Drives ``ready`` of one stream port and collects transfers."""

    def __init__(self, dut, prefix: str, *, clk=None, backpressure: float = 0.0,
                 seed: int = 0):
        super().__init__(dut, prefix, clk)
        self.backpressure = _probability("backpressure", backpressure)
        self.rng = random.Random(seed)
        self.items: list[tuple[int, int]] = []    # (run_streams cycle, payload)
        self._ready = False
        self.ready.value = 0

    def drive(self) -> None:
        """After the falling edge: ``ready`` high unless backpressure."""
        self._ready = not (self.backpressure and self.rng.random() < self.backpressure)
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


# ---------------------------------------------------------------------------- AXI (cocotbext-axi)

OKAY, EXOKAY, SLVERR, DECERR = 0, 1, 2, 3
RESP_NAMES = {OKAY: "OKAY", EXOKAY: "EXOKAY", SLVERR: "SLVERR", DECERR: "DECERR"}


def pause_generator(probability: float, seed: int) -> Iterator[bool] | None:
    """cocotbext-axi pause generator: paused (VALID held back by a source, READY low at a
    sink) with ``probability`` in each cycle, from ``random.Random(seed)``; None for 0."""
    _probability("pause probability", probability)
    if not probability:
        return None

    def pauses():
        rng = random.Random(seed)
        while True:
            yield rng.random() < probability
    return pauses()


def _bus_prefix(dut, prefix: str, name: str) -> str:
    """``prefix`` as cocotbext-axi's ``from_prefix`` wants it: the top's ``s_axi_awaddr`` or
    Amaranth's flattened ``s_axi__awaddr``."""
    for pre in (prefix, prefix + "_"):
        if getattr(dut, f"{pre}_{name}", None) is not None:
            return pre
    raise AttributeError(f"no signal {prefix}_{name} or {prefix}__{name} in {dut._name}")


def _set_pauses(model, gen) -> None:
    """Install pause generator ``gen`` on a cocotbext-axi model; None: never paused (a
    cleared generator leaves the pause flag as it was)."""
    model.set_pause_generator(gen)
    if gen is None:
        model.pause = False


def _quiet(*models) -> None:
    """cocotbext-axi logs every transaction at INFO (whole frames as bytes): warnings only."""
    for model in models:
        model.log.setLevel(logging.WARNING)


class AxiLiteProtocolError(AssertionError):
    """A transaction got no response in time."""


class AxiLiteMaster:
    """AXI4-Lite master: cocotbext-axi's ``AxiLiteMaster`` with 32-bit register accessors.

    Parameters
    ----------
    dut : cocotb handle holding the bus signals (``<prefix>_awaddr`` or ``<prefix>__awaddr``).
    clk, reset : the bus clock and its active-high reset (None: no reset handling).
    delay : float in [0, 1): probability, in each cycle, of a pause on every channel (AW, W
        and AR hold VALID back; B and R hold READY low), from cocotbext-axi's pause
        generators. 0 gives back-to-back transactions.
    seed : random seed of the pauses (each channel its own stream).
    timeout : cycles after which a transaction with no response raises
        :class:`AxiLiteProtocolError`.

    The protocol rules themselves are checked by :class:`sim.axi_monitor.AxiMonitor`.
    """

    def __init__(self, dut, clk, prefix: str = "s_axi", *, reset=None, delay: float = 0.0,
                 seed: int = 0, timeout: int = 1000):
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster as Master
        _probability("delay", delay)
        if timeout < 1:
            raise ValueError(f"timeout = {timeout!r} is out of range: allowed >= 1")
        bus = AxiLiteBus.from_prefix(dut, _bus_prefix(dut, prefix, "awaddr"))
        self.master = Master(bus, clk, reset)
        _quiet(self.master.write_if, self.master.read_if)
        self.clk = clk
        self.addr_bits = len(bus.write.aw.awaddr)
        self.timeout = timeout
        self.set_delay(delay, seed)
        # Transactions one at a time, in call order (as the register tests expect).
        self._lock = Lock()

    def set_delay(self, delay: float, seed: int) -> None:
        """Pause every channel with probability ``delay`` per cycle from now on."""
        wr, rd = self.master.write_if, self.master.read_if
        for i, channel in enumerate((wr.aw_channel, wr.w_channel, wr.b_channel,
                                     rd.ar_channel, rd.r_channel)):
            _set_pauses(channel, pause_generator(delay, seed * 8 + i))

    def _check(self, addr: int, data: int | None = None):
        if not 0 <= addr < 1 << self.addr_bits:
            raise ValueError(f"address {addr:#x} is out of range: allowed "
                             f"0..{(1 << self.addr_bits) - 1:#x}")
        if data is not None and not 0 <= data < 1 << 32:
            raise ValueError(f"data {data:#x} is out of range: allowed 0..0xffffffff")

    async def _timed(self, coro, what: str):
        task = cocotb.start_soon(coro)
        await First(task, ClockCycles(self.clk, self.timeout))
        if not task.done():
            task.cancel()
            raise AxiLiteProtocolError(f"{what}: no response in {self.timeout} cycles")
        return task.result()

    async def write(self, addr: int, data: int, strb: int = 0xF) -> int:
        """Write ``data`` to the word at byte address ``addr``, bytes enabled by ``strb``;
        returns the response code (``OKAY`` = 0, ``SLVERR`` = 2, ...).

        ``strb`` must enable one contiguous run of bytes (1, 3, 6, 0xC, 7, 0xF, ...):
        cocotbext-axi derives WSTRB from the address and length of the data it writes."""
        self._check(addr, data)
        lanes = [i for i in range(4) if strb >> i & 1]
        if not lanes or strb != sum(1 << i for i in range(lanes[0], lanes[-1] + 1)):
            raise ValueError(f"strb {strb:#x} is not a contiguous, non-empty run of bytes")
        first, last = lanes[0], lanes[-1]
        payload = int(data).to_bytes(4, "little")[first:last + 1]
        async with self._lock:
            resp = await self._timed(self.master.write((addr & ~3) + first, payload),
                                     f"write {addr:#x}")
        return int(resp.resp)

    async def read(self, addr: int) -> tuple[int, int]:
        """Read the word at byte address ``addr``; returns ``(data, resp)``."""
        self._check(addr)
        async with self._lock:
            resp = await self._timed(self.master.read(addr & ~3, 4), f"read {addr:#x}")
        return int.from_bytes(bytes(resp.data), "little"), int(resp.resp)

    async def write_block(self, addr: int, words) -> list[int]:
        """Write consecutive 32-bit ``words`` from ``addr`` up; returns the responses."""
        return [await self.write(addr + 4 * i, int(w)) for i, w in enumerate(words)]


class AxiStreamWords:
    """AXI4-Stream source or sink of 32-bit words: cocotbext-axi's ``AxiStreamSource`` or
    ``AxiStreamSink`` (no TKEEP: every word is whole) with a pause generator of probability
    ``pause`` (a source's idle cycles, a sink's backpressure)."""

    def __init__(self, dut, prefix: str, clk, reset=None, *, sink: bool, pause: float = 0.0,
                 seed: int = 0):
        from cocotbext.axi import AxiStreamBus, AxiStreamSink, AxiStreamSource
        bus = AxiStreamBus.from_prefix(dut, prefix)
        self.model = (AxiStreamSink if sink else AxiStreamSource)(bus, clk, reset)
        _quiet(self.model)
        self.clk = clk
        self.set_pause(pause, seed)

    def set_pause(self, pause: float, seed: int) -> None:
        """Pause with probability ``pause`` per cycle from now on."""
        _set_pauses(self.model, pause_generator(pause, seed))

    async def send(self, words, timeout: int | None = None) -> bool:
        """Send ``words`` as one packet (TLAST on the last); True once all were taken, False
        if they were not within ``timeout`` cycles (the rest is then dropped)."""
        from cocotbext.axi import AxiStreamFrame
        data = b"".join(int(w).to_bytes(4, "little") for w in words)
        await self.model.send(AxiStreamFrame(data))
        done = cocotb.start_soon(self.model.wait())
        try:
            if timeout is None:
                await done
                return True
            await First(done, ClockCycles(self.clk, timeout))
            if done.done():
                return True
            self.model.clear()
            return False
        finally:
            if not done.done():
                done.cancel()

    async def receive(self, timeout: int | None = None) -> list[int] | None:
        """The next packet's words (up to TLAST); None if none completed within ``timeout``
        cycles. Cancelling the caller cancels the wait, so no later packet is lost to it."""
        task = cocotb.start_soon(self.model.recv())
        try:
            if timeout is None:
                await task
            else:
                await First(task, ClockCycles(self.clk, timeout))
            if not task.done():
                return None
            data = bytes(task.result().tdata)
        finally:
            if not task.done():
                task.cancel()
        return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]

    def clear(self) -> None:
        self.model.clear()
