"""numpy with one BLAS thread, for the processes that start per trial and the measuring service's workers.

numpy's OpenBLAS starts a thread per core as it loads, and those threads spin while they start: on a
many-core host that costs seconds of CPU for every process that imports numpy (docs/results.md, "Trials a
second through nnictl"), the time of a build.  An nnictl trial does no linear algebra, nor do the
service's workers (a reference is computed at sampled indices: trial/verify.py), so they load numpy
with one thread.  A value the user set for $OPENBLAS_NUM_THREADS is kept, and the environment is left
as it was, so that processes started later (the service a trial starts) get the user's.
"""
from __future__ import annotations

import os

VARIABLE = "OPENBLAS_NUM_THREADS"


def load_numpy() -> None:
    """Import numpy now, with one BLAS thread unless $OPENBLAS_NUM_THREADS is set."""
    unset = VARIABLE not in os.environ
    if unset:
        os.environ[VARIABLE] = "1"
    try:
        import numpy  # noqa: F401  (OpenBLAS reads the variable as it loads)
    finally:
        if unset:
            del os.environ[VARIABLE]
