"""``attention_top``: the accelerator as an IP block with AXI interfaces.

Ports (names follow AXI conventions so vendor tools infer the interfaces)
-------------------------------------------------------------------------
clk, rst
    One clock; synchronous active-high reset. A reset clears every register and run state;
    block RAM contents (weights) survive, but ``STATUS.WEIGHTS_VALID`` is cleared, so software
    writes ``WEIGHTS_COMMIT`` again (or reloads) before the next run.
s_axi_* (AXI4-Lite slave, 32-bit data)
    Control, status, parameters and the write-only weight window; see :mod:`hw.bus.regmap` and
    docs/register_map.md.
s_axis_tdata[31:0], s_axis_tvalid, s_axis_tready, s_axis_tlast (AXI4-Stream slave)
    Activations after ``START``: SEQ_LEN rows of d_model int8 (element 4a+k in byte k of word
    a) or, with ``act_bits = 16``, int16 (element 2a+k in half-word k), ``tlast`` on the last word; in cross mode then KV_LEN rows of the second sequence, again
    ending with ``tlast``. ``tready`` is low except while a run is loading its input.
m_axis_tdata[31:0], m_axis_tvalid, m_axis_tready, m_axis_tlast (AXI4-Stream master)
    SEQ_LEN result rows of d_model activations in the same packing; ``tlast`` on the final word.
irq
    ``CTRL.IRQ_EN & (STATUS.DONE | STATUS.ERROR)``, level.

A run: write the weights into the window, the requantization registers and
``WEIGHTS_COMMIT``; then per sequence write SEQ_LEN (KV_LEN, KEY_LEN), CTRL with START, stream
the input in, collect the output, wait for STATUS.DONE (or ``irq``). Weights stay resident for
every later run. Bad settings set STATUS.ERROR with a cause in ERROR_CAUSE and leave the engine
idle (:mod:`hw.bus.regmap` lists the causes).
"""

from __future__ import annotations

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.config import AttentionConfig

from hw.core.attention_core import AttentionCore
from hw.bus.axi_lite import AxiLiteRegs
from hw.bus.regmap import build_regmap

__all__ = ["AttentionTop"]

_AXIL = ("awaddr", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready", "bresp",
         "bvalid", "bready", "araddr", "arvalid", "arready", "rdata", "rresp", "rvalid",
         "rready")


class AttentionTop(wiring.Component):
    def __init__(self, cfg: AttentionConfig):
        self.cfg = cfg
        self.regmap = build_regmap(cfg)
        aw = self.regmap.addr_width
        bus = {
            "awaddr": In(aw), "awvalid": In(1), "awready": Out(1),
            "wdata": In(32), "wstrb": In(4), "wvalid": In(1), "wready": Out(1),
            "bresp": Out(2), "bvalid": Out(1), "bready": In(1),
            "araddr": In(aw), "arvalid": In(1), "arready": Out(1),
            "rdata": Out(32), "rresp": Out(2), "rvalid": Out(1), "rready": In(1),
        }
        ports = {f"s_axi_{k}": v for k, v in bus.items()}
        ports.update({
            "s_axis_tdata": In(32), "s_axis_tvalid": In(1), "s_axis_tready": Out(1),
            "s_axis_tlast": In(1),
            "m_axis_tdata": Out(32), "m_axis_tvalid": Out(1), "m_axis_tready": In(1),
            "m_axis_tlast": Out(1),
            "irq": Out(1),
        })
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = AxiLiteRegs(self.cfg)
        m.submodules.core = core = AttentionCore(self.cfg)

        for k in _AXIL:
            ours, theirs = getattr(self, f"s_axi_{k}"), getattr(regs.s_axi, k)
            if k in ("awready", "wready", "bresp", "bvalid", "arready", "rdata", "rresp",
                     "rvalid"):
                m.d.comb += ours.eq(theirs)
            else:
                m.d.comb += theirs.eq(ours)

        m.d.comb += [
            core.x_in.payload.data.eq(self.s_axis_tdata),
            core.x_in.payload.last.eq(self.s_axis_tlast),
            core.x_in.valid.eq(self.s_axis_tvalid),
            self.s_axis_tready.eq(core.x_in.ready),
            self.m_axis_tdata.eq(core.y_out.payload.data),
            self.m_axis_tlast.eq(core.y_out.payload.last),
            self.m_axis_tvalid.eq(core.y_out.valid),
            core.y_out.ready.eq(self.m_axis_tready),
            self.irq.eq(regs.irq),
        ]

        wiring.connect(m, regs.start, core.start)
        wiring.connect(m, regs.window, core.window)
        m.d.comb += [
            regs.busy.eq(core.busy),
            regs.done_set.eq(core.done),
            regs.error_set.eq(core.error),
            regs.error_cause.eq(core.error_cause),
            regs.cycles.eq(core.cycles), regs.busy_cycles.eq(core.busy_cycles),
            regs.stall_cycles.eq(core.stall_cycles),
        ]
        return m
