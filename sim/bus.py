"""cocotb bus models (cocotb 2.x): valid/ready streams, AXI4-Stream and an AXI4-Lite master.

Every cocotb testbench of the project drives the design through this module.

Timing: every model drives after the falling edge and samples in the read-only phase before
the rising edge, so it sees each handshake exactly as the design does, in Icarus and
Verilator alike. Random idle cycles and backpressure come from ``random.Random(seed)``; a
probability of 0 draws nothing, so the seed then does not matter.

- :class:`StreamSource` / :class:`StreamSink`: one valid/ready port, either an Amaranth
  ``stream`` port (flattened to ``<prefix>__payload``, ``__valid``, ``__ready``) or an
  AXI4-Stream port (``<prefix>_tdata``, ``_tvalid``, ``_tready``, ``_tlast``). The source
  leaves ``valid`` low with probability ``idle`` between payloads (a raised ``valid`` is held,
  payload unchanged, until taken); the sink drives ``ready`` low with probability
  ``backpressure``. Two ways to clock them: :meth:`StreamSource.send` and
  :meth:`StreamSink.receive` run one port on their own (AXI4-Stream transfers closed by
  ``tlast``); :meth:`StreamSource.put` queues payloads and :func:`run_streams` clocks any
  number of ports together with two simulator waits per cycle, recording the cycle of every
  transfer (``StreamSource.accepted``, ``StreamSink.items``).
- :class:`AxiLiteMaster`: AXI4-Lite master with random VALID delays and READY backpressure
  and protocol checks.
- :func:`clock_and_reset`; payload packing: :func:`pack_fields`, :func:`pack_array`,
  :func:`unpack_array`, :func:`pack_rows`, :func:`unpack_words`.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Callable, Iterable, Sequence

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, Lock, ReadOnly, RisingEdge

__all__ = ["clock_and_reset", "StreamSource", "StreamSink", "run_streams",
           "AxiLiteMaster", "AxiLiteProtocolError", "RESP_NAMES", "OKAY", "SLVERR",
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


def pack_rows(rows) -> list[int]:
    """int8 rows (2-D, width % 4 == 0) -> 32-bit words, element 4a+k in byte k of word a."""
    words = []
    for row in rows:
        vals = [int(v) & 0xFF for v in row]
        for a in range(0, len(vals), 4):
            words.append(vals[a] | vals[a + 1] << 8 | vals[a + 2] << 16 | vals[a + 3] << 24)
    return words


def unpack_words(words, width: int) -> list[list[int]]:
    """32-bit words -> rows of ``width`` signed int8 values."""
    flat = []
    for w in words:
        for k in range(4):
            b = (w >> (8 * k)) & 0xFF
            flat.append(b - 256 if b & 0x80 else b)
    return [flat[i:i + width] for i in range(0, len(flat), width)]


# ---------------------------------------------------------------------------- clock, reset

async def clock_and_reset(dut, period_ns: int = 10, cycles: int = 2) -> None:
    """Start ``dut.clk`` and hold the synchronous ``dut.rst`` for ``cycles`` cycles."""
    cocotb.start_soon(Clock(dut.clk, period_ns, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


# ---------------------------------------------------------------------------- streams

# Amaranth's flattening of a stream port, and AXI4-Stream's names (which add tlast).
_STREAM_STYLES = ({"payload": "__payload", "valid": "__valid", "ready": "__ready"},
                  {"payload": "_tdata", "valid": "_tvalid", "ready": "_tready",
                   "last": "_tlast"})


class _StreamPort:
    """The signals of stream ``prefix`` of ``dut``: ``payload``, ``valid``, ``ready`` and
    ``last`` (None on an Amaranth stream port)."""

    def __init__(self, dut, prefix: str, clk):
        for style in _STREAM_STYLES:
            if getattr(dut, prefix + style["valid"], None) is not None:
                break
        else:
            raise AttributeError(f"no stream {prefix} in {dut._name}: neither "
                                 f"{prefix}__valid nor {prefix}_tvalid")
        self.payload = getattr(dut, prefix + style["payload"])
        self.valid = getattr(dut, prefix + style["valid"])
        self.ready = getattr(dut, prefix + style["ready"])
        self.last = getattr(dut, prefix + style["last"]) if "last" in style else None
        self.clk = dut.clk if clk is None else clk


class StreamSource(_StreamPort):
    """Drives ``valid``/``payload`` (and ``tlast``) of one stream port from a queue."""

    def __init__(self, dut, prefix: str, *, clk=None, idle: float = 0.0, seed: int = 0):
        super().__init__(dut, prefix, clk)
        self.idle = _probability("idle", idle)
        self.rng = random.Random(seed)
        self.queue: deque[tuple[int, int]] = deque()     # (payload, last)
        self.offering = False
        self.accepted: list[int] = []    # run_streams cycle of each transfer
        self.valid.value = 0
        self.payload.value = 0
        if self.last is not None:
            self.last.value = 0

    def put(self, items: Iterable[int], last_at: int | None = None) -> None:
        """Queue ``items``; ``tlast`` (AXI4-Stream) on item ``last_at`` (default: the final
        one; -1: none)."""
        items = [int(x) for x in items]
        last_at = len(items) - 1 if last_at is None else last_at
        self.queue.extend((x, int(i == last_at)) for i, x in enumerate(items))

    @property
    def idle_now(self) -> bool:
        return not self.queue and not self.offering

    def drive(self) -> None:
        """After the falling edge: raise ``valid`` with the next payload unless idle."""
        if not self.offering and self.queue and not (self.idle
                                                     and self.rng.random() < self.idle):
            self.offering = True
            data, last = self.queue[0]
            self.payload.value = data
            if self.last is not None:
                self.last.value = last
        self.valid.value = int(self.offering)

    def sample(self, cycle: int) -> bool:
        """In the read-only phase: True (and the payload leaves the queue) on a transfer."""
        if self.offering and self.ready.value:
            self.queue.popleft()
            self.offering = False
            self.accepted.append(cycle)
            return True
        return False

    async def send(self, words, last_at: int | None = None, timeout: int = 100_000) -> int:
        """Send ``words`` on this port alone; ``tlast`` on word ``last_at`` (default: the final
        one; -1: never).

        Returns the number of words taken. Gives up (returning the count so far, the rest
        dropped) once the sink has held ``ready`` low for ``timeout`` consecutive cycles.
        """
        # Whatever a cancelled send left in the queue is dropped.
        self.queue.clear()
        self.offering = False
        self.put(words, last_at)
        n, stalled, cycle = len(self.queue), 0, 0
        while self.queue and stalled < timeout:
            await FallingEdge(self.clk)
            self.drive()
            await ReadOnly()
            if self.sample(cycle):
                stalled = 0
            elif self.offering:
                stalled += 1
            cycle += 1
        sent = n - len(self.queue)
        self.queue.clear()
        self.offering = False
        await FallingEdge(self.clk)
        self.valid.value = 0
        if self.last is not None:
            self.last.value = 0
        return sent


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

    def take(self) -> tuple[int, int] | None:
        """In the read-only phase: ``(payload, last)`` of a transfer, or None."""
        if self._ready and self.valid.value:
            return (int(self.payload.value),
                    int(self.last.value) if self.last is not None else 0)
        return None

    def sample(self, cycle: int) -> None:
        beat = self.take()
        if beat is not None:
            self.items.append((cycle, beat[0]))

    async def stop(self) -> None:
        """``ready`` low from the next falling edge on."""
        await FallingEdge(self.clk)
        self._ready = False
        self.ready.value = 0

    async def receive(self, timeout: int = 10_000_000) -> tuple[list[int], bool]:
        """Collect words on this port alone, up to and including the one with ``tlast``.

        Returns ``(words, complete)``; ``complete`` is False when ``timeout`` cycles passed
        without ``tlast``. ``ready`` is low again afterwards.
        """
        words = []
        for _ in range(timeout):
            await FallingEdge(self.clk)
            self.drive()
            await ReadOnly()
            beat = self.take()
            if beat is not None:
                words.append(beat[0])
                if beat[1]:
                    await self.stop()
                    return words, True
        await self.stop()
        return words, False


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


# ---------------------------------------------------------------------------- AXI4-Lite

# AxiLiteMaster(dut, clk, prefix="s_axi") finds <prefix>_awaddr (the accelerator top's names)
# or <prefix>__awaddr (Amaranth's flattening of an AxiLiteSignature port). One transaction
# runs at a time (concurrent callers queue on a lock). With delay > 0, each of AWVALID, WVALID
# and ARVALID waits a random number of cycles before rising (so AW may come before, after or
# with W) and BREADY/RREADY are low with probability delay in each cycle. Payload signals
# carry random garbage while their VALID is low, so a slave that samples them at the wrong
# time is caught. Protocol violations seen by the master (BVALID before both AW and W were
# accepted, RVALID before AR, a response that changes or drops while waiting for READY, a
# transaction that never finishes) raise AxiLiteProtocolError.

OKAY, EXOKAY, SLVERR, DECERR = 0, 1, 2, 3
RESP_NAMES = {OKAY: "OKAY", EXOKAY: "EXOKAY", SLVERR: "SLVERR", DECERR: "DECERR"}
_SIGNALS = ("awaddr", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready", "bresp",
            "bvalid", "bready", "araddr", "arvalid", "arready", "rdata", "rresp", "rvalid",
            "rready")


class AxiLiteProtocolError(AssertionError):
    """The slave broke an AXI4-Lite rule, or a transaction timed out."""


class AxiLiteMaster:
    """AXI4-Lite master.

    Parameters
    ----------
    dut : cocotb handle holding the bus signals.
    clk : the bus clock handle.
    prefix : signal-name prefix; ``_`` or ``__`` separates it from the AXI name.
    delay : float in [0, 1): probability of an idle cycle before each VALID and of a low
        READY in each response cycle. 0 gives back-to-back transactions.
    seed : random seed of the delays and of the garbage payloads.
    timeout : cycles after which a transaction is declared stuck.
    """

    def __init__(self, dut, clk, prefix: str = "s_axi", *, delay: float = 0.0, seed: int = 0,
                 timeout: int = 1000):
        if not 0.0 <= delay < 1.0:
            raise ValueError(f"delay = {delay!r} is out of range: allowed 0 <= delay < 1")
        if timeout < 1:
            raise ValueError(f"timeout = {timeout!r} is out of range: allowed >= 1")
        self.clk = clk
        for name in _SIGNALS:
            for sep in ("_", "__"):
                handle = getattr(dut, f"{prefix}{sep}{name}", None)
                if handle is not None:
                    setattr(self, name, handle)
                    break
            else:
                raise AttributeError(
                    f"no signal {prefix}_{name} or {prefix}__{name} in {dut._name}")
        self.addr_bits = len(self.awaddr)
        self.data_bits = len(self.wdata)
        self.strb_all = (1 << (self.data_bits // 8)) - 1
        self.delay = delay
        self.timeout = timeout
        self.rng = random.Random(seed)
        self._lock = Lock()
        for name in ("awvalid", "wvalid", "bready", "arvalid", "rready"):
            getattr(self, name).value = 0
        for name in ("awaddr", "wdata", "wstrb", "araddr"):
            getattr(self, name).value = 0

    # ------------------------------------------------------------------ timing

    def _wait(self) -> int:
        """Idle cycles before a VALID rises (geometric with parameter ``delay``)."""
        n = 0
        while self.delay and self.rng.random() < self.delay and n < 16:
            n += 1
        return n

    def _ready(self) -> int:
        return int(not (self.delay and self.rng.random() < self.delay))

    def _check(self, addr: int, data: int | None = None, strb: int | None = None):
        if not 0 <= addr < 1 << self.addr_bits:
            raise ValueError(f"address {addr:#x} is out of range: allowed "
                             f"0..{(1 << self.addr_bits) - 1:#x}")
        if data is not None and not 0 <= data < 1 << self.data_bits:
            raise ValueError(f"data {data:#x} is out of range: allowed "
                             f"0..{(1 << self.data_bits) - 1:#x}")
        if strb is not None and not 0 <= strb <= self.strb_all:
            raise ValueError(f"strb {strb:#x} is out of range: allowed 0..{self.strb_all:#x}")

    # ------------------------------------------------------------------ transactions

    async def write(self, addr: int, data: int, strb: int | None = None) -> int:
        """Write ``data`` to byte address ``addr`` with byte strobes ``strb`` (default: all).

        Returns the response code (``OKAY`` = 0, ``SLVERR`` = 2, ...).
        """
        strb = self.strb_all if strb is None else strb
        self._check(addr, data, strb)
        async with self._lock:
            return await self._write(addr, data, strb)

    async def _write(self, addr, data, strb):
        rng = self.rng
        aw_wait, w_wait = self._wait(), self._wait()
        aw_done = w_done = False
        resp = None
        for cycle in range(self.timeout):
            await FallingEdge(self.clk)
            aw_on = not aw_done and cycle >= aw_wait
            w_on = not w_done and cycle >= w_wait
            b_on = self._ready()
            self.awvalid.value = int(aw_on)
            self.awaddr.value = addr if aw_on else rng.getrandbits(self.addr_bits)
            self.wvalid.value = int(w_on)
            self.wdata.value = data if w_on else rng.getrandbits(self.data_bits)
            self.wstrb.value = strb if w_on else rng.getrandbits(self.data_bits // 8)
            self.bready.value = b_on
            await ReadOnly()
            if self.bvalid.value:
                if not (aw_done and w_done):
                    raise AxiLiteProtocolError(
                        f"write {addr:#x}: BVALID before both AW and W were accepted")
                if b_on:
                    resp = int(self.bresp.value)
            aw_done |= aw_on and bool(self.awready.value)
            w_done |= w_on and bool(self.wready.value)
            if resp is not None:
                break
        else:
            raise AxiLiteProtocolError(f"write {addr:#x}: no response in {self.timeout} cycles")
        await FallingEdge(self.clk)
        self.awvalid.value = 0
        self.wvalid.value = 0
        self.bready.value = 0
        return resp

    async def read(self, addr: int) -> tuple[int, int]:
        """Read byte address ``addr``; returns ``(data, resp)``."""
        self._check(addr)
        async with self._lock:
            return await self._read(addr)

    async def _read(self, addr):
        ar_wait = self._wait()
        ar_done = False
        seen = None
        for cycle in range(self.timeout):
            await FallingEdge(self.clk)
            ar_on = not ar_done and cycle >= ar_wait
            r_on = self._ready()
            self.arvalid.value = int(ar_on)
            self.araddr.value = addr if ar_on else self.rng.getrandbits(self.addr_bits)
            self.rready.value = r_on
            await ReadOnly()
            if self.rvalid.value:
                if not ar_done:
                    raise AxiLiteProtocolError(f"read {addr:#x}: RVALID before AR was accepted")
                now = (int(self.rdata.value), int(self.rresp.value))
                if seen not in (None, now):
                    raise AxiLiteProtocolError(
                        f"read {addr:#x}: RDATA/RRESP changed while waiting for RREADY")
                seen = now
                if r_on:
                    break
            elif seen is not None:
                raise AxiLiteProtocolError(f"read {addr:#x}: RVALID dropped before RREADY")
            ar_done |= ar_on and bool(self.arready.value)
        else:
            raise AxiLiteProtocolError(f"read {addr:#x}: no data in {self.timeout} cycles")
        await FallingEdge(self.clk)
        self.arvalid.value = 0
        self.rready.value = 0
        return seen

    async def write_block(self, addr: int, words) -> list[int]:
        """Write consecutive 32-bit ``words`` from ``addr`` up; returns the responses."""
        step = self.data_bits // 8
        return [await self.write(addr + step * i, int(w)) for i, w in enumerate(words)]
