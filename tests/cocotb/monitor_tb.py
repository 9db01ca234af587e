"""The AXI monitor catches each rule it claims to check: every test drives the bare signals of
``fixtures/axi_wires.v`` through a short script of cycles that breaks one rule (or none) and
checks the violation the monitor reports."""

from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

from sim.axi_monitor import AxiMonitor

SIGNALS = ("awvalid", "awready", "wvalid", "wready", "bvalid", "bready", "arvalid", "arready",
           "rvalid", "rready")


async def setup(dut):
    for name in SIGNALS:
        getattr(dut, f"s_axi_{name}").value = 0
    for s in ("s_axis", "m_axis"):
        for name in ("tvalid", "tready", "tlast", "tdata"):
            getattr(dut, f"{s}_{name}").value = 0
    for name in ("awaddr", "wdata", "wstrb", "bresp", "araddr", "rdata", "rresp"):
        getattr(dut, f"s_axi_{name}").value = 0
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    mon = AxiMonitor(dut, strict=False)     # collect violations instead of failing
    await ClockCycles(dut.clk, 2)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    return mon


async def play(dut, script):
    """``script``: one dict of signal values per cycle, set after the falling edge."""
    for values in script:
        await FallingEdge(dut.clk)
        for name, v in values.items():
            getattr(dut, name).value = v
    await ClockCycles(dut.clk, 2)


def expect(mon, *fragments):
    text = " | ".join(mon.violations)
    if not fragments:
        assert not mon.violations, text
    for f in fragments:
        assert f in text, f"wanted {f!r}, monitor said: {text or 'nothing'}"


@cocotb.test()
async def clean_traffic_passes(dut):
    mon = await setup(dut)
    mon.expect_packet(2)
    await play(dut, [
        dict(s_axi_awvalid=1, s_axi_awaddr=4, s_axi_wvalid=1, s_axi_wdata=7),
        dict(s_axi_awready=1, s_axi_wready=1),                      # AW and W taken
        dict(s_axi_awvalid=0, s_axi_wvalid=0, s_axi_awready=0, s_axi_wready=0, s_axi_bvalid=1),
        dict(s_axi_bready=1),                                       # B taken
        dict(s_axi_bvalid=0, s_axi_bready=0, s_axi_arvalid=1),
        dict(s_axi_arready=1),
        dict(s_axi_arvalid=0, s_axi_arready=0, s_axi_rvalid=1, s_axi_rdata=5),
        dict(s_axi_rready=1),
        dict(s_axi_rvalid=0, s_axi_rready=0, m_axis_tvalid=1, m_axis_tdata=1),
        dict(m_axis_tready=1),
        dict(m_axis_tdata=2, m_axis_tlast=1),
        dict(m_axis_tvalid=0, m_axis_tlast=0),
    ])
    expect(mon)
    assert mon.beats["s_axi.b"] == 1 and mon.beats["m_axis"] == 2


@cocotb.test()
async def valid_dropped_before_ready(dut):
    mon = await setup(dut)
    await play(dut, [dict(m_axis_tvalid=1, m_axis_tdata=3), dict(m_axis_tvalid=0)])
    expect(mon, "m_axis: VALID fell before READY (the design)")


@cocotb.test()
async def payload_changed_while_stalled(dut):
    mon = await setup(dut)
    await play(dut, [dict(s_axi_arvalid=1, s_axi_araddr=8), dict(s_axi_araddr=12)])
    expect(mon, "s_axi.ar: payload changed while waiting for READY (the testbench)")


@cocotb.test()
async def response_without_request(dut):
    mon = await setup(dut)
    await play(dut, [dict(s_axi_rvalid=1, s_axi_rready=1), dict(s_axi_rvalid=0)])
    expect(mon, "s_axi.r: a read response without an outstanding read")


@cocotb.test()
async def write_response_before_w(dut):
    mon = await setup(dut)
    await play(dut, [dict(s_axi_awvalid=1, s_axi_awready=1),
                     dict(s_axi_awvalid=0, s_axi_awready=0, s_axi_bvalid=1, s_axi_bready=1),
                     dict(s_axi_bvalid=0)])
    expect(mon, "s_axi.b: a write response without a write whose AW and W")


@cocotb.test()
async def tlast_misplaced(dut):
    mon = await setup(dut)
    mon.expect_packet(3)
    await play(dut, [dict(m_axis_tvalid=1, m_axis_tready=1, m_axis_tlast=0),
                     dict(m_axis_tlast=1), dict(m_axis_tvalid=0, m_axis_tlast=0)])
    expect(mon, "m_axis: TLAST on word 2 of a 3-word packet")
    mon.violations.clear()
    mon.forget_packets()
    mon.expect_packet(1)
    await play(dut, [dict(m_axis_tvalid=1, m_axis_tlast=0), dict(m_axis_tvalid=0)])
    expect(mon, "m_axis: no TLAST on the last word (1)")


@cocotb.test()
async def valid_after_reset(dut):
    mon = await setup(dut)
    await play(dut, [dict(rst=1), dict(rst=0, s_axi_bvalid=1), dict(s_axi_bvalid=0)])
    expect(mon, "s_axi.b: VALID high the cycle after reset")
