"""The deep-learning backends. Each ``learners/backends/<backend>/`` package holds that framework's
learners, networks and ops, and a ``runtime`` module with the functions the training entry calls:

- ``has_gpu() -> bool``: whether the framework can compute on a CUDA GPU in this process, and
  ``no_gpu_reason() -> str``: why not, as the end of the error a ``cuda`` run gets without one;
- ``seed(seed: int) -> None``: seed the framework's global random state;
- ``gpu_names() -> list[str]``: the GPUs the framework sees on this machine (none: ``[]``);
- ``describe_device(device: str) -> str``: a resolved device as a run record shows it (``cpu``,
  ``cuda:0 (NVIDIA H100 80GB HBM3)``);
- optionally ``set_threads(threads: int) -> None``: cap the framework's CPU threads per op.

CPU threads: a run uses ``MARLFORGE_CPU_THREADS`` threads per op (default 1). The learners' networks
are small; measured on a 2-core machine shared with other processes, a PyTorch DDPG update of
256x256 MLPs took 16 ms on 1 thread and 454 ms on 2 (threads spinning against each other), while
on the same machine idle 2 threads were only 1.4x faster than 1.

Nothing here imports a framework: the backend's runtime module is imported only when asked for.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from learners.enums import Backend, Device

THREADS_ENV = "MARLFORGE_CPU_THREADS"


GPU_BACKENDS: frozenset[Backend] = frozenset({Backend.TORCH, Backend.TENSORFLOW})
"""The backends whose runtime can compute on a CUDA GPU (their ``resolve_device`` may answer
``cuda``). MindSpore is installed as its CPU build, whose runtime refuses ``cuda``: it gets no GPU
queue, and a ``cuda`` spec for it is refused at submission (``learners.admission.parse``, a 422
on ``device``)."""


class DeviceUnavailable(RuntimeError):
    """The spec asked for a device this worker does not have."""


def runtime(backend: Backend | str) -> ModuleType:
    """The ``runtime`` module of ``backend`` (imports that framework)."""
    return importlib.import_module(f"learners.backends.{Backend(backend).value}.runtime")


def resolve_device(backend: Backend | str, device: Device | str) -> str:
    """The device ``backend`` runs ``device`` on: ``cpu``, or ``cuda`` where the framework sees a
    GPU and the spec did not ask for the CPU (``auto`` picks CUDA when there is one). ``cuda`` on a
    machine without one raises ``DeviceUnavailable``, never a silent fallback to the CPU."""
    device = Device(device)
    if device == Device.CPU:
        return "cpu"
    module = runtime(backend)
    if module.has_gpu():
        return "cuda"
    if device == Device.CUDA:
        raise DeviceUnavailable(f"the spec asks for device 'cuda' but {module.no_gpu_reason()}")
    return "cpu"


def gpu_names(backend: Backend | str) -> list[str]:
    """The GPUs ``backend``'s framework sees on this machine, by name (imports that framework)."""
    names: list[str] = runtime(backend).gpu_names()
    return names


def describe_device(backend: Backend | str, device: str) -> str:
    """``device`` (as ``resolve_device`` answered it) as a run record shows it: ``cpu``, or the
    GPU's index and name (``cuda:0 (NVIDIA H100 80GB HBM3)``)."""
    described: str = runtime(backend).describe_device(device)
    return described


def cpu_threads() -> int:
    """Threads per op a run may use on the CPU (``MARLFORGE_CPU_THREADS``, default 1)."""
    return threads_setting(THREADS_ENV, os.environ.get(THREADS_ENV, "1"))


def threads_setting(name: str, raw: str) -> int:
    """The thread count ``raw`` (the value of the environment variable ``name``) asks for; a
    ``ValueError`` naming the variable unless it is a positive integer."""
    try:
        threads = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}") from None
    if threads < 1:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")
    return threads


def prepare_backend(backend: Backend | str, seed: int) -> None:
    """Seed ``backend`` and cap its CPU threads (``cpu_threads``) for a run in this process."""
    module = runtime(backend)
    module.seed(seed)
    set_threads = getattr(module, "set_threads", None)  # optional: not every framework can
    if set_threads is not None:
        set_threads(cpu_threads())
