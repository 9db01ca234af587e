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
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.runner import BUILD_ROOT, REPO_ROOT, VERILATOR_ARGS, _locked, simulator_env

__all__ = ["HARNESS_SOURCE", "ICARUS_HARNESS_SOURCE", "HARNESS_SIMULATORS", "OPT_LEVEL",
           "Script", "HarnessRun", "HarnessError", "HarnessTimeout", "build_harness",
           "build_icarus_harness", "run_script"]

HARNESS_SOURCE = REPO_ROOT / "sim" / "harness" / "attention_top_harness.cpp"
#: The same harness as a Verilog testbench, for Icarus (``simulator="icarus"``).
ICARUS_HARNESS_SOURCE = REPO_ROOT / "sim" / "harness" / "attention_top_tb.v"
HARNESS_SIMULATORS = ("verilator", "icarus")
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


def build_icarus_harness(verilog: Path) -> Path:
    """The Icarus model of ``verilog`` (module ``attention_top``) with the Verilog harness
    (``vvp`` file), built once per Verilog text and harness source; returns its path."""
    verilog = Path(verilog).resolve()
    text = verilog.read_text()
    width = re.search(r"input\s*\[(\d+):0\]\s*s_axi_awaddr\s*;", text)
    if width is None:
        raise HarnessError(f"{verilog}: no s_axi_awaddr input (not an attention_top?)")
    digest = hashlib.sha256(text.encode())
    digest.update(ICARUS_HARNESS_SOURCE.read_bytes())
    folder = BUILD_ROOT / "harness" / f"attention_top-icarus-{digest.hexdigest()[:16]}"
    model = folder / "attention_top_tb.vvp"
    if model.exists():
        return model
    with _locked(folder.with_suffix(".lock")):
        if model.exists():
            return model
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        iverilog = shutil.which("iverilog")
        if iverilog is None:
            raise HarnessError("iverilog not found: install Icarus Verilog (Debian: iverilog)")
        cmd = [iverilog, "-g2012", "-o", str(folder / "tmp.vvp"), "-s", "attention_top_tb",
               f"-Pattention_top_tb.ADDR_W={int(width.group(1)) + 1}", str(verilog),
               str(ICARUS_HARNESS_SOURCE)]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        (folder / "build.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise HarnessError(f"the Icarus harness build failed; log: {folder / 'build.log'}\n"
                               + (proc.stderr or proc.stdout)[-2000:])
        (folder / "build_seconds").write_text(f"{time.monotonic() - t0:.1f}\n")
        (folder / "tmp.vvp").rename(model)
    return model


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
        return (tag, " ".join(rest[:-1]), int(rest[-1]))
    return (tag, *map(int, rest))


def run_script(verilog: Path, script: Script, *, opt: str | None = None,
               simulator: str = "verilator") -> HarnessRun:
    """Build (or reuse) the harness for ``verilog`` in ``simulator`` (``"verilator"``: the
    C++ harness, ``opt`` its level; ``"icarus"``: the Verilog one) and run ``script``.
    Raises :class:`HarnessTimeout` when a wait exceeds the script's cycle limit."""
    if simulator not in HARNESS_SIMULATORS:
        raise ValueError(f"simulator = {simulator!r} is not one of "
                         f"{', '.join(HARNESS_SIMULATORS)}")
    with tempfile.TemporaryDirectory(prefix="harness-") as tmp:
        tmp = Path(tmp)
        (tmp / "script.txt").write_text("\n".join(script.lines) + "\n")
        data = np.concatenate(script.data) if script.data else np.zeros(0, np.uint32)
        if simulator == "verilator":
            binary = build_harness(verilog, opt=opt)
            data.astype("<u4").tofile(tmp / "data.bin")
            cmd = [str(binary), str(tmp / "script.txt"), str(tmp / "data.bin"),
                   str(tmp / "results.txt"), str(tmp / "out.bin")]
        else:
            model = build_icarus_harness(verilog)
            np.savetxt(tmp / "data.hex", data.astype(np.uint32), fmt="%08x")
            cmd = ["vvp", "-n", str(model), f"+script={tmp / 'script.txt'}",
                   f"+data={tmp / 'data.hex'}", f"+words={len(data)}",
                   f"+results={tmp / 'results.txt'}", f"+outwords={tmp / 'out.hex'}"]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.monotonic() - t0
        text = (tmp / "results.txt").read_text() if (tmp / "results.txt").exists() else ""
        records = [_parse(ln) for ln in text.splitlines() if ln.strip()]
        if simulator == "icarus":
            # The testbench's last record is its exit status ("Z code").
            code = records.pop()[1] if records and records[-1][0] == "Z" else None
            if proc.returncode != 0 or code is None:
                raise HarnessError(f"Icarus harness failed (vvp exit {proc.returncode}): "
                                   f"{(proc.stdout + proc.stderr).strip()[-2000:]}")
            proc.returncode, proc.stderr = code, proc.stdout + proc.stderr
        if proc.returncode == 3:
            where = next((r for r in records if r[0] == "T"), ("T", "?", -1))
            raise HarnessTimeout(f"the design did not answer: {where[1]} still waiting at "
                                 f"cycle {where[2]} (limit {script_limit(script)} cycles)")
        if proc.returncode not in (0, 4):
            raise HarnessError(f"harness exit {proc.returncode}: {proc.stderr.strip()}")
        if simulator == "verilator":
            out = np.fromfile(tmp / "out.bin", dtype="<u4")
        else:
            lines = (tmp / "out.hex").read_text().split()
            out = np.array([int(w, 16) for w in lines], dtype=np.uint32)
    # exit 4: stopped at an unexpected STATUS.ERROR (the "X" record); no "D" record then
    total = next((r[1] for r in reversed(records) if r[0] == "D"), -1)
    return HarnessRun(records, out, total, seconds)


def script_limit(script: Script) -> int:
    for line in reversed(script.lines):
        if line.startswith("limit "):
            return int(line.split()[1])
    return 50_000_000
