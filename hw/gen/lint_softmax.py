"""``verilator --lint-only -Wall`` of the softmax unit's generated Verilog, with waivers.

Run as ``python -m hw.gen.lint_softmax [--config configs/default.toml]``; the report goes to
``build/lint/softmax/<config>.txt``. Exits with status 1 on any warning beyond the waivers.

Waivers: the project's :data:`hw.gen.verilog.LINT_WAIVERS` (implicit widening/truncation, unused
bits, Yosys case and memory idioms), plus two that every Amaranth design through
:func:`hw.gen.verilog.write_verilog` triggers:

- ``PROCASSINIT``: Yosys declares every register with its reset value as an initialiser
  (``reg x = 1'h0;``) and assigns it in ``always @(posedge clk)``;
- ``STMTDLY``: the Icarus time-0 fix (``initial #0 ...``) has a delay that ``--no-timing``
  ignores, as intended.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from golden import load_config
from hw.blocks.softmax import SoftmaxUnit
from hw.gen.verilog import LINT_WAIVERS, REPO_ROOT, write_verilog
from sim.runner import verilator_bin_dir

__all__ = ["SOFTMAX_WAIVERS", "lint_softmax"]

SOFTMAX_WAIVERS = {
    **LINT_WAIVERS,
    "PROCASSINIT": "Yosys initialises every register at its declaration (the reset value)",
    "STMTDLY": "the Icarus time-0 fix's '#0' delay, ignored under --no-timing",
}


def lint_softmax(cfg, name: str | None = None) -> tuple[list[str], Path]:
    """Lint the unit for ``cfg``; returns (warning and error lines, report path)."""
    name = name or cfg.name
    out = REPO_ROOT / "build" / "lint" / "softmax"
    vfile = write_verilog(SoftmaxUnit(cfg), "softmax_unit", out / f"softmax_{name}.v")
    cmd = [str(verilator_bin_dir() / "verilator"), "--lint-only", "-Wall", "--no-timing",
           *[f"-Wno-{w}" for w in SOFTMAX_WAIVERS], "--top-module", "softmax_unit", str(vfile)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    report = out / f"{name}.txt"
    report.write_text(" ".join(cmd) + "\n\n" + text)
    issues = [l for l in text.splitlines() if l.startswith(("%Warning", "%Error"))]
    if proc.returncode and not issues:
        issues = [f"verilator exited with {proc.returncode}"]
    return issues, report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/default.toml")
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    issues, report = lint_softmax(cfg)
    print(f"{cfg.name}: {len(issues)} issue(s) beyond the waivers "
          f"({', '.join(SOFTMAX_WAIVERS)}); report: {report}")
    for line in issues[:20]:
        print("  " + line)
    return 1 if issues else 0


if __name__ == "__main__":
    sys.exit(main())
