"""Device choice, seeding and the process-wide MindSpore settings.

MindSpore's execution settings are per process and most can be set only once, so ``configure`` is
called by every module of this backend on import and does its work the first time only:

- the CPU device (the project installs MindSpore's CPU build; MindSpore 2.10 has no CUDA build
  for this platform, so ``cuda`` is refused with a clear error rather than silently run on the CPU);
- blocking launches: operators run synchronously on the calling thread. MindSpore's default hands
  every operator to dispatch threads, and each read back to NumPy (one per rollout step) then waits
  for a thread hand-off, which on a busy two-core worker costs milliseconds;
- kernel threads: ``MARLFORGE_MINDSPORE_THREADS`` when set, else ``MARLFORGE_CPU_THREADS`` as for
  every backend (default 1). MindSpore's default of 25 threads per kernel oversubscribes a worker's
  cores for networks this small, and MindSpore takes the setting once per process, so it is applied
  here, before the first kernel runs.
"""

from __future__ import annotations

import os

import mindspore as ms
from mindspore._c_expression import RuntimeConf

from learners.backends import cpu_threads, threads_setting

THREADS_ENV = "MARLFORGE_MINDSPORE_THREADS"
_configured = False


def configure() -> None:
    """Apply the backend's process-wide settings (once; later calls do nothing)."""
    global _configured
    if _configured:
        return
    ms.set_device("CPU")
    conf = RuntimeConf.get_instance()
    if not conf.is_launch_blocking():
        ms.runtime.launch_blocking()
    set_threads(_threads())
    _configured = True


def _threads() -> int:
    raw = os.environ.get(THREADS_ENV)
    return cpu_threads() if raw is None else threads_setting(THREADS_ENV, raw)


def set_threads(threads: int) -> None:
    """Cap MindSpore's CPU kernels at ``threads`` threads. MindSpore accepts this once per
    process; later calls leave the first setting in place (every run of a worker process asks for
    the same number)."""
    if not RuntimeConf.get_instance().is_op_threads_num_configured():
        ms.device_context.cpu.op_tuning.threads_num(threads)


def has_gpu() -> bool:
    """False: ``auto`` is the CPU and ``cuda`` is refused (MindSpore runs on the CPU here)."""
    return False


def no_gpu_reason() -> str:
    return (
        "the MindSpore backend runs on the CPU "
        f"(mindspore {ms.__version__}, CPU build); use 'auto' or 'cpu', or another backend"
    )


def gpu_names() -> list[str]:
    """None: this backend runs on the CPU (see ``has_gpu``)."""
    return []


def describe_device(device: str) -> str:
    """Always ``cpu`` here."""
    return device


def seed(seed: int) -> None:
    """Seed MindSpore's global generator (the learners draw from their own NumPy generators)."""
    ms.set_seed(seed)


configure()
