"""The deep-learning backends. Each ``learners/backends/<backend>/`` package holds that framework's
learners, networks and ops, and a ``runtime`` module with two functions the training entry calls:

- ``resolve_device(device: Device) -> str``: the device a run computes on; ``cuda`` on a machine
  without one raises ``DeviceUnavailable`` (never a silent fallback to the CPU);
- ``seed(seed: int) -> None``: seed the framework's global random state.

Nothing here imports a framework: the backend's runtime module is imported only when asked for.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from learners.enums import Backend, Device


class DeviceUnavailable(RuntimeError):
    """The spec asked for a device this worker does not have."""


def runtime(backend: Backend | str) -> ModuleType:
    """The ``runtime`` module of ``backend`` (imports that framework)."""
    return importlib.import_module(f"learners.backends.{Backend(backend).value}.runtime")


def resolve_device(backend: Backend | str, device: Device | str) -> str:
    """The concrete device ``backend`` runs ``device`` on (``auto`` picks CUDA when there is one)."""
    resolved: str = runtime(backend).resolve_device(Device(device))
    return resolved


def seed_backend(backend: Backend | str, seed: int) -> None:
    """Seed ``backend``'s global random state."""
    runtime(backend).seed(seed)
