"""Passive AXI protocol monitor for cocotb testbenches of ``attention_top``.

:class:`AxiMonitor` samples every cycle, in the read-only phase before the rising edge (the
values the design's flip-flops see), and checks the AXI rules on the AXI4-Lite slave
``s_axi`` and the AXI4-Stream ports ``s_axis`` and ``m_axis`` — the same rules that
``sim/properties/`` states for the formal proofs:

- a raised VALID stays high, its payload unchanged, until READY (every channel; for the
  master-side channels this checks the testbench, for the others the design);
- the slave's BVALID, RVALID and ``m_axis`` TVALID are low the cycle after a reset;
- one response per request: a B only for a write whose AW and W were both taken earlier,
  an R only for a taken AR;
- TLAST placement on ``m_axis``: with :meth:`AxiMonitor.expect_packet` the output packets'
  lengths are known, and TLAST must come on exactly the last word of each.

A violation is recorded in :attr:`AxiMonitor.violations` and raised as
:class:`AxiProtocolViolation` from the monitor's task, which fails the running cocotb test;
:meth:`AxiMonitor.check` raises it again for a test that catches task failures itself. The
monitor also counts handshakes per channel (:attr:`AxiMonitor.beats`).
"""

from __future__ import annotations

from collections import deque

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly

__all__ = ["AxiMonitor", "AxiProtocolViolation"]

# channel: (valid, ready, payload signals, driven by the design)
_AXIL = {
    "aw": ("awvalid", "awready", ("awaddr",), False),
    "w": ("wvalid", "wready", ("wdata", "wstrb"), False),
    "b": ("bvalid", "bready", ("bresp",), True),
    "ar": ("arvalid", "arready", ("araddr",), False),
    "r": ("rvalid", "rready", ("rdata", "rresp"), True),
}


class AxiProtocolViolation(AssertionError):
    """An AXI rule was broken (by the design or by the testbench, as the message says)."""


class _Channel:
    def __init__(self, name, valid, ready, payload, by_design):
        self.name, self.valid, self.ready, self.payload = name, valid, ready, payload
        self.by_design = by_design
        self.stalled: tuple | None = None     # payload of a VALID that waits for READY


class AxiMonitor:
    """Checks ``s_axi`` (prefix ``axil``), ``s_axis`` and ``m_axis`` of ``dut`` each cycle
    (``streams``; ``out_stream`` is the design's output, whose TLAST is placed)."""

    def __init__(self, dut, clk=None, rst=None, *, axil: str = "s_axi",
                 streams: tuple[str, ...] = ("s_axis", "m_axis"), out_stream: str = "m_axis",
                 strict: bool = True):
        self.strict = strict        # False: record violations without raising
        self.clk = dut.clk if clk is None else clk
        self.rst = dut.rst if rst is None else rst
        self.channels: list[_Channel] = []
        for ch, (v, r, pay, by_design) in _AXIL.items():
            sig = lambda n: getattr(dut, f"{axil}_{n}")      # noqa: E731
            self.channels.append(_Channel(f"{axil}.{ch}", sig(v), sig(r),
                                          tuple(sig(p) for p in pay), by_design))
        for s in streams:
            sig = lambda n: getattr(dut, f"{s}_{n}")         # noqa: E731
            self.channels.append(_Channel(s, sig("tvalid"), sig("tready"),
                                          (sig("tdata"), sig("tlast")), s == out_stream))
        self._by_name = {c.name: c for c in self.channels}
        self._axil = axil
        self._out = self._by_name.get(out_stream) if out_stream else None
        self.beats = {c.name: 0 for c in self.channels}
        self.violations: list[str] = []
        self.cycle = 0
        self._packets: deque[int] = deque()     # expected m_axis packet lengths, in words
        self._word = 0                          # words of the current output packet
        self._pending = {"aw": 0, "w": 0, "ar": 0}
        self._task = cocotb.start_soon(self._run())

    def expect_packet(self, words: int) -> None:
        """The next output packet has ``words`` words (TLAST on the last)."""
        self._packets.append(words)

    def forget_packets(self) -> None:
        """Drop the announced packets (a run that ended in an error streams nothing)."""
        self._packets.clear()
        self._word = 0

    def stop(self) -> None:
        self._task.cancel()

    def check(self) -> None:
        """Raise the first violation seen, if any."""
        if self.violations:
            raise AxiProtocolViolation(self.violations[0])

    def _fail(self, text: str) -> None:
        msg = f"cycle {self.cycle}: {text}"
        self.violations.append(msg)
        if self.strict:
            raise AxiProtocolViolation(msg)

    async def _run(self):
        was_reset = False
        while True:
            await FallingEdge(self.clk)
            await ReadOnly()
            self.cycle += 1
            if int(self.rst.value):
                was_reset = True
                for c in self.channels:
                    c.stalled = None
                self._pending = {"aw": 0, "w": 0, "ar": 0}
                self.forget_packets()
                continue
            fire = {}
            for c in self.channels:
                # READY and the payload matter only with VALID: read them only then (each
                # read is a simulator call; this halves them on an idle bus).
                valid = int(c.valid.value)
                if not valid:
                    if c.stalled is not None:
                        who = "the design" if c.by_design else "the testbench"
                        self._fail(f"{c.name}: VALID fell before READY ({who})")
                    c.stalled = None
                    fire[c.name] = 0
                    continue
                if was_reset and c.by_design:
                    self._fail(f"{c.name}: VALID high the cycle after reset")
                payload = tuple(int(p.value) for p in c.payload)
                if c.stalled is not None and payload != c.stalled:
                    who = "the design" if c.by_design else "the testbench"
                    self._fail(f"{c.name}: payload changed while waiting for READY "
                               f"({who}): {c.stalled} -> {payload}")
                ready = int(c.ready.value)
                fire[c.name] = ready
                c.stalled = None if ready else payload
                if ready:
                    self.beats[c.name] += 1
            was_reset = False
            self._responses(fire)
            if self._out is not None and fire[self._out.name]:
                self._output_word()

    def _responses(self, fire: dict) -> None:
        a, p = self._axil, self._pending
        if fire[f"{a}.b"]:
            if p["aw"] == 0 or p["w"] == 0:
                self._fail(f"{a}.b: a write response without a write whose AW and W were "
                           f"both taken before (AW {p['aw']}, W {p['w']} outstanding)")
            p["aw"] -= 1
            p["w"] -= 1
        if fire[f"{a}.r"]:
            if p["ar"] == 0:
                self._fail(f"{a}.r: a read response without an outstanding read")
            p["ar"] -= 1
        p["aw"] += fire[f"{a}.aw"]
        p["w"] += fire[f"{a}.w"]
        p["ar"] += fire[f"{a}.ar"]

    def _output_word(self) -> None:
        last = int(self._out.payload[1].value)
        self._word += 1
        if not self._packets:       # lengths not announced: nothing to place TLAST against
            if last:
                self._word = 0
            return
        want = self._packets[0]
        if last and self._word != want:
            self._fail(f"{self._out.name}: TLAST on word {self._word} of a {want}-word packet")
        if self._word == want:
            if not last:
                self._fail(f"{self._out.name}: no TLAST on the last word ({want}) of a packet")
            self._packets.popleft()
            self._word = 0
