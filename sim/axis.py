"""cocotb AXI4-Stream source and sink for the accelerator's ``s_axis_*`` / ``m_axis_*`` ports.

Both drive after the falling edge and sample in the read-only phase before the rising edge, so
a handshake is seen exactly as the design sees it, in Icarus and Verilator alike. The source
leaves ``tvalid`` low with probability ``idle`` (only between words: a raised ``tvalid`` is held
until taken, as AXI4-Stream requires); the sink leaves ``tready`` low with probability
``backpressure``.
"""

from __future__ import annotations

import random

from cocotb.triggers import FallingEdge, ReadOnly

__all__ = ["AxisSource", "AxisSink", "pack_rows", "unpack_words"]


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


class _AxisPort:
    """The four AXI4-Stream signals ``<prefix>_t{data,valid,ready,last}`` of ``dut``, and a
    random pattern with probability ``p`` (checked to lie in 0 <= p < 1)."""

    def __init__(self, dut, clk, prefix: str, what: str, p: float, seed: int):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"{what} = {p!r} is out of range: allowed 0 <= {what} < 1")
        self.clk = clk
        for sig in ("tdata", "tvalid", "tready", "tlast"):
            setattr(self, sig, getattr(dut, f"{prefix}_{sig}"))
        self.rng = random.Random(seed)


class AxisSource(_AxisPort):
    def __init__(self, dut, clk, prefix: str = "s_axis", idle: float = 0.0, seed: int = 0):
        super().__init__(dut, clk, prefix, "idle", idle, seed)
        self.idle = idle
        self.tvalid.value = 0
        self.tlast.value = 0
        self.tdata.value = 0

    async def send(self, words, last_at: int | None = None, timeout: int = 100_000) -> int:
        """Send ``words``; ``tlast`` on word ``last_at`` (default: the final one; -1: never).

        Returns the number of words taken. Gives up (returning the count so far) once the
        sink has held ``tready`` low for ``timeout`` consecutive cycles.
        """
        n = len(words)
        last_at = n - 1 if last_at is None else last_at
        sent, stalled, offering = 0, 0, False
        while sent < n and stalled < timeout:
            await FallingEdge(self.clk)
            if not offering and not (self.idle and self.rng.random() < self.idle):
                offering = True
                self.tdata.value = words[sent]
                self.tlast.value = int(sent == last_at)
            self.tvalid.value = int(offering)
            await ReadOnly()
            if offering and self.tready.value:
                sent += 1
                offering = False
                stalled = 0
            elif offering:
                stalled += 1
        await FallingEdge(self.clk)
        self.tvalid.value = 0
        self.tlast.value = 0
        return sent


class AxisSink(_AxisPort):
    def __init__(self, dut, clk, prefix: str = "m_axis", backpressure: float = 0.0,
                 seed: int = 1):
        super().__init__(dut, clk, prefix, "backpressure", backpressure, seed)
        self.backpressure = backpressure
        self.tready.value = 0

    async def receive(self, timeout: int = 10_000_000) -> tuple[list[int], bool]:
        """Collect words up to and including the one with ``tlast``.

        Returns ``(words, complete)``; ``complete`` is False when ``timeout`` cycles passed
        without ``tlast``.
        """
        words = []
        for _ in range(timeout):
            await FallingEdge(self.clk)
            ready = not (self.backpressure and self.rng.random() < self.backpressure)
            self.tready.value = int(ready)
            await ReadOnly()
            if ready and self.tvalid.value:
                words.append(int(self.tdata.value))
                if self.tlast.value:
                    await FallingEdge(self.clk)
                    self.tready.value = 0
                    return words, True
        await FallingEdge(self.clk)
        self.tready.value = 0
        return words, False
