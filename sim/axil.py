"""cocotb AXI4-Lite master for any slave port with AXI signal names (cocotb 2.x).

``AxiLiteMaster(dut, clk, prefix="s_axi")`` finds ``<prefix>_awaddr`` (the accelerator top's
names) or ``<prefix>__awaddr`` (Amaranth's flattening of an ``AxiLiteSignature`` port).

It drives after the falling edge and samples in the read-only phase before the rising edge
(like ``sim/axis.py``), so it sees every handshake exactly as the slave does, in Icarus and
Verilator alike. One transaction runs at a time (concurrent callers queue on a lock). With
``delay`` > 0, each of AWVALID, WVALID and ARVALID waits a random number of cycles before
rising (so AW may come before, after or with W) and BREADY/RREADY are low with probability
``delay`` in each cycle. Payload signals carry random garbage while their VALID is low, so a
slave that samples them at the wrong time is caught. Protocol violations seen by the master
(BVALID before both AW and W were accepted, RVALID before AR, a response that changes or
drops while waiting for READY, a transaction that never finishes) raise
:class:`AxiLiteProtocolError`.
"""

from __future__ import annotations

import random

from cocotb.triggers import FallingEdge, Lock, ReadOnly

__all__ = ["AxiLiteMaster", "AxiLiteProtocolError", "RESP_NAMES", "OKAY", "SLVERR"]

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
