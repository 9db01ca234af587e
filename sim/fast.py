"""The fast simulation path: ``attention_top`` compiled by Verilator with a C++ harness
(``sim/harness/attention_top_harness.cpp``) that drives AXI4-Lite and both AXI4-Streams from
buffers in memory.

The harness runs a *script* (text commands: register writes and reads, weight-window blocks,
input words queued on ``s_axis``, waits) over one binary *data* file (the words the commands
point into), and returns the records of the run and every word received on ``m_axis``. No
Python runs per cycle. :class:`Script` writes scripts; :func:`run_script` builds (once per
Verilog, C++ source and options, like every model in :mod:`sim.runner`) and runs.

C++ optimisation: :data:`OPT_LEVEL` is ``-O1``, chosen by measurement on the default
configuration's top (a seq-64 layer with its weight load, 111,621 simulated cycles; 2 cores
shared with other jobs, so the build times are rough):

========  ===========  ==================
level     build        simulated cycles/s
========  ===========  ==================
``-O0``   385 s        6,300
``-O1``   309 s        99,000
``-O2``   175 s        71,000
========  ===========  ==================

``-O0`` saved no build time in this measurement and runs 16x slower; ``-O2`` ran no faster
than ``-O1`` (its shorter build was measured while the machine was less loaded). On a small
top the build dominates instead: the two-engine tiny top builds in 19 s at ``-O0`` and 33 s
at ``-O1`` (one core, the other busy), and a test's layers run in under a second either way,
so the regression builds its harnesses at ``-O0`` (``run_layer(..., harness_opt="-O0")``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.runner import BUILD_ROOT, REPO_ROOT, VERILATOR_ARGS, _locked, simulator_env

__all__ = ["HARNESS_SOURCE", "OPT_LEVEL", "Script", "HarnessRun", "HarnessError",
           "HarnessTimeout", "build_harness", "run_script"]

HARNESS_SOURCE = REPO_ROOT / "sim" / "harness" / "attention_top_harness.cpp"
OPT_LEVEL = "-O1"
# The model's Verilator options are those of the cocotb builds (without VPI).
_ARGS = list(VERILATOR_ARGS)


class HarnessError(RuntimeError):
    """The harness refused its input or the model misbehaved."""


class HarnessTimeout(HarnessError):
    """A wait in the script did not end within the cycle limit (the design hung)."""


def build_harness(verilog: Path, *, opt: str | None = None) -> Path:
    """The harness binary for ``verilog`` (module ``attention_top``), built once per Verilog
    text, harness source and options (``opt``: the C++ level, default :data:`OPT_LEVEL`);
    returns its path."""
    opt = opt or OPT_LEVEL
    simulator_env()
    verilog = Path(verilog).resolve()
    digest = hashlib.sha256()
    digest.update(verilog.read_bytes())
    digest.update(HARNESS_SOURCE.read_bytes())
    digest.update(repr((_ARGS, opt)).encode())
    folder = BUILD_ROOT / "harness" / f"attention_top-{digest.hexdigest()[:16]}"
    binary = folder / "attention_top_harness"
    if binary.exists():
        return binary
    with _locked(folder.with_suffix(".lock")):
        if binary.exists():
            return binary
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        env = dict(os.environ)
        # The model and the harness at one optimisation level (verilated.mk's defaults
        # differ per file kind); PCH and python3 work around the wheel's verilated.mk.
        env["MAKEFLAGS"] = (f"CFG_CXXFLAGS_PCH_I=-include PYTHON3=python3 OPT_FAST={opt} "
                            f"OPT_SLOW={opt} OPT_GLOBAL={opt}")
        if shutil.which("ccache"):
            env["OBJCACHE"] = "ccache"
        cmd = (["verilator", "--cc", "--exe", "--build", "-j", "2", "--top-module",
                "attention_top", "-Mdir", str(folder / "obj"), "-o", str(binary)]
               + _ARGS + [str(verilog), str(HARNESS_SOURCE)])
        t0 = time.monotonic()
        proc = subprocess.run(cmd, env=env, cwd=folder, capture_output=True, text=True)
        (folder / "build.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0 or not binary.exists():
            raise HarnessError(f"the harness build failed; log: {folder / 'build.log'}\n"
                               + (proc.stderr or proc.stdout)[-2000:])
        (folder / "build_seconds").write_text(f"{time.monotonic() - t0:.1f}\n")
    return binary


@dataclass
class Script:
    """Commands for the harness and the words they point into (see the harness source for
    the command set)."""

    lines: list[str] = field(default_factory=list)
    data: list[np.ndarray] = field(default_factory=list)
    words: int = 0

    def add(self, *parts) -> None:
        self.lines.append(" ".join(str(int(p)) if not isinstance(p, str) else p
                                   for p in parts))

    def put(self, words) -> tuple[int, int]:
        """Append ``words`` to the data; returns (offset, count)."""
        arr = np.asarray(words, dtype=np.int64).astype(np.uint32)
        off = self.words
        self.data.append(arr)
        self.words += len(arr)
        return off, len(arr)

    def settings(self, *, seed: int, idle: float, backpressure: float, limit: int) -> None:
        for name, p in (("idle", idle), ("backpressure", backpressure)):
            if not 0.0 <= p < 1.0:
                raise ValueError(f"{name} = {p!r} is out of range: allowed 0 <= {name} < 1")
        self.lines += [f"seed {int(seed)}", f"idle {float(idle)!r}",
                       f"backpressure {float(backpressure)!r}", f"limit {int(limit)}"]


@dataclass
class HarnessRun:
    records: list[tuple]       # (tag, *numbers) in order, e.g. ("R", value, resp)
                               # ("X", tag, status, cause): stopped at an unexpected error
    out_words: np.ndarray      # uint32, every word received on m_axis
    cycles: int                # simulated cycles (-1 when stopped at an error)
    seconds: float             # wall time of the simulation (without the build)


def _parse(line: str) -> tuple:
    tag, *rest = line.split()
    if tag == "T":
        return (tag, rest[0], int(rest[1]))
    return (tag, *map(int, rest))


def run_script(verilog: Path, script: Script, *, opt: str | None = None) -> HarnessRun:
    """Build (or reuse) the harness for ``verilog`` and run ``script``. Raises
    :class:`HarnessTimeout` when a wait exceeds the script's cycle limit."""
    binary = build_harness(verilog, opt=opt)
    with tempfile.TemporaryDirectory(prefix="harness-") as tmp:
        tmp = Path(tmp)
        (tmp / "script.txt").write_text("\n".join(script.lines) + "\n")
        data = np.concatenate(script.data) if script.data else np.zeros(0, np.uint32)
        data.astype("<u4").tofile(tmp / "data.bin")
        t0 = time.monotonic()
        proc = subprocess.run([str(binary), str(tmp / "script.txt"), str(tmp / "data.bin"),
                               str(tmp / "results.txt"), str(tmp / "out.bin")],
                              capture_output=True, text=True)
        seconds = time.monotonic() - t0
        text = (tmp / "results.txt").read_text() if (tmp / "results.txt").exists() else ""
        records = [_parse(ln) for ln in text.splitlines() if ln.strip()]
        if proc.returncode == 3:
            where = next((r for r in records if r[0] == "T"), ("T", "?", -1))
            raise HarnessTimeout(f"the design did not answer: {where[1]} still waiting at "
                                 f"cycle {where[2]} (limit {script_limit(script)} cycles)")
        if proc.returncode not in (0, 4):
            raise HarnessError(f"harness exit {proc.returncode}: {proc.stderr.strip()}")
        out = np.fromfile(tmp / "out.bin", dtype="<u4")
    # exit 4: stopped at an unexpected STATUS.ERROR (the "X" record); no "D" record then
    total = next((r[1] for r in reversed(records) if r[0] == "D"), -1)
    return HarnessRun(records, out, total, seconds)


def script_limit(script: Script) -> int:
    for line in reversed(script.lines):
        if line.startswith("limit "):
            return int(line.split()[1])
    return 50_000_000
