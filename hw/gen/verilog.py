"""Verilog generation shared by every block: Amaranth -> Verilog, made simulator-safe.

``to_verilog`` converts a component and applies one fix: Yosys's time-0 trigger register
(``reg \\$auto$verilog_backend... = 0;``) becomes an ``initial #0`` assignment, so Icarus runs
every ``always @*`` block once at time 0 instead of leaving outputs at X (Amaranth issue
594); :func:`_trigger_comb_blocks` does the same for every ``always @*`` block. Verilator then
needs ``--no-timing``. Absolute source paths in ``src``
attributes are made relative to the repository, so the output does not depend on the checkout.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from amaranth.back import verilog

__all__ = ["to_verilog", "write_verilog", "REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parents[2]

_TRIGGER = re.compile(r"reg (\\\$auto\$verilog_backend\S*) += 0;")


_MEM_INIT_LINE = re.compile(r"\s*(\S+)\[(\d+)\] = \d+'[hdb]0+;$")


def _fold_zero_memory_inits(text: str) -> str:
    """Replace Yosys's one-line-per-word all-zero memory initialisers by a ``for`` loop.

    Yosys writes ``initial begin mem[0] = 64'h0; mem[1] = ...; end`` for every memory, which
    makes the BERT-size top 60 MB; the loop is equivalent for every simulator and synthesis tool.
    """
    out, lines, i, n = [], text.split("\n"), 0, 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == "initial begin":
            j, name, count = i + 1, None, 0
            while j < len(lines):
                mm = _MEM_INIT_LINE.match(lines[j])
                if not mm or (name is not None and mm.group(1) != name) or int(mm.group(2)) != count:
                    break
                name, count, j = mm.group(1), count + 1, j + 1
            if name is not None and lines[j].strip() == "end":
                n += 1
                out += [f"  initial begin : mem_zero_init_{n}",
                        "    integer i;",
                        f"    for (i = 0; i < {count}; i = i + 1) {name}[i] = 0;",
                        "  end"]
                i = j + 1
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


_T0 = "t0_trigger"


def _trigger_comb_blocks(text: str) -> str:
    """Make every ``always @*`` block run once at time 0 (Icarus).

    An ``always @*`` block runs only when one of its inputs changes; a block whose inputs keep
    their initial values (``always @* y[3:0] = r;`` with ``r`` never leaving its init) leaves
    its outputs at X in Icarus. Each module gets a register ``t0_trigger`` that an
    ``initial #0`` changes from X to 0, and every such block reads it.
    """
    out, lines, i = [], text.split("\n"), 0
    in_header = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("module "):
            in_header = True
        if in_header:
            out.append(line)
            if stripped.endswith(");"):
                in_header = False
                out += [f"  reg {_T0};", f"  initial #0 {_T0} = 1'b0;"]
            i += 1
            continue
        if stripped == "always @*" and i + 1 < len(lines) \
                and lines[i + 1].rstrip().endswith(";"):
            out += ["  always @* begin", f"    if ({_T0}) begin end", lines[i + 1], "  end"]
            i += 2
            continue
        out.append(line)
        if stripped == "always @* begin":
            out.append(f"    if ({_T0}) begin end")
        i += 1
    return "\n".join(out)


def to_verilog(component, name: str) -> str:
    """Verilog text of ``component`` as module ``name``, with the Icarus time-0 fix applied."""
    text = verilog.convert(component, name=name, emit_src=True)
    text = _TRIGGER.sub(lambda m: f"reg {m.group(1)} ;\n  initial #0 {m.group(1)} = 1'b0;", text)
    text = _fold_zero_memory_inits(text)
    text = _trigger_comb_blocks(text)
    site = str(Path(verilog.__file__).resolve().parent.parent.parent)
    return text.replace(str(REPO_ROOT) + "/", "").replace(site + "/", "")


def write_verilog(component, name: str, path: str | Path) -> Path:
    """Write ``to_verilog(component, name)`` to ``path`` unless it already holds that text."""
    path = Path(path)
    text = to_verilog(component, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        # A private temporary name: parallel test workers may write the same file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    return path

# Verilator -Wall warnings waived for Amaranth/Yosys output, with the reason for each. Every
# other warning fails `make lint`.
LINT_WAIVERS = {
    "DECLFILENAME": "Yosys writes every submodule into the one file of the top",
    "UNUSEDSIGNAL": "Amaranth keeps unused bits of wider intermediate values and struct fields",
    "UNUSEDPARAM": "Yosys emits unused localparams for memory initialisation",
    "WIDTHEXPAND": "Amaranth's operators widen operands implicitly, as its semantics define",
    "WIDTHTRUNC": "Amaranth's assignments truncate implicitly, as its semantics define",
    "CASEINCOMPLETE": "Yosys emits case statements whose default is the preceding assignment",
    "PINCONNECTEMPTY": "Yosys leaves unused output pins of memories unconnected",
    "PROCASSINIT": "Yosys declares registers with their reset value and assigns them in always",
    "STMTDLY": "the `initial #0` of the Icarus time-0 fix above (ignored under --no-timing)",
}
