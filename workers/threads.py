"""How many CPU threads the deep-learning frameworks of a worker process may use.

A worker runs one training at a time, on networks of a few hundred units. Left to themselves the
frameworks start a thread per core for every op, and on a machine the worker shares (with the API,
other workers, the env copies) those threads spin against each other: 400 PyTorch DDPG steps on
Pendulum took 32-38 s with 2 threads per op on this project's busy 2-core machine and 7-10 s with
one. So the worker caps them at ``MARLFORGE_WORKER_THREADS`` (default 1).

The caps are environment variables that each library reads once, when it is first imported (OpenMP,
MKL and OpenBLAS size their pools then, TensorFlow its intra- and inter-op pools), so they are set
when the worker starts, before any job imports a framework. This module imports none: the learners
import a framework only when a run asks for it. The learners read ``MARLFORGE_CPU_THREADS`` (torch's
per-op threads, set again at every run) and ``MARLFORGE_MINDSPORE_THREADS`` themselves.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping

log = logging.getLogger(__name__)

# Each variable and who reads it.
THREAD_VARIABLES: dict[str, str] = {
    "OMP_NUM_THREADS": "OpenMP: PyTorch's intra-op pool, NumPy's BLAS when built with OpenMP",
    "MKL_NUM_THREADS": "Intel MKL (PyTorch and NumPy builds that use it)",
    "OPENBLAS_NUM_THREADS": "OpenBLAS (NumPy's wheels)",
    "TF_NUM_INTRAOP_THREADS": "TensorFlow: threads inside one op",
    "TF_NUM_INTEROP_THREADS": "TensorFlow: ops run at once",
    "MARLFORGE_CPU_THREADS": "learners: torch.set_num_threads at the start of every run",
    "MARLFORGE_MINDSPORE_THREADS": "learners: MindSpore's kernel threads",
}
FRAMEWORKS = ("torch", "tensorflow", "mindspore")


def thread_environment(threads: int) -> dict[str, str]:
    """The variables that cap every framework at ``threads`` CPU threads."""
    if threads < 1:
        raise ValueError(f"a worker needs at least one thread, not {threads}")
    return {name: str(threads) for name in THREAD_VARIABLES}


def limit_threads(threads: int, environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the caps of ``thread_environment`` in ``environ`` (this process's environment by
    default) and return those set. A variable already set is kept: one library can be tuned on
    its own while the setting covers the rest."""
    target = os.environ if environ is None else environ
    applied = {}
    for name, value in thread_environment(threads).items():
        if name not in target:
            target[name] = value
            applied[name] = value
    if environ is None:
        imported = [name for name in FRAMEWORKS if name in sys.modules]
        if imported:
            # Their pools are sized already; only the per-run calls of the learners still apply.
            log.warning("%s imported before the thread limits were set", ", ".join(imported))
    return applied
