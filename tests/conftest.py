"""Shared pytest setup.

BLAS threads: the machines have 2 cores shared by pytest-xdist workers and other users, and a
multi-threaded OpenBLAS then thrashes (measured: a default-config float layer run 0.41 s with
one thread, 8.9 s with two under load). One thread per process unless the caller says
otherwise; this must happen before NumPy is imported.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
