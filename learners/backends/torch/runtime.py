"""Device choice and seeding for PyTorch runs."""

from __future__ import annotations

import torch

from learners.backends import DeviceUnavailable
from learners.enums import Device


def resolve_device(device: Device) -> str:
    """``cpu``, ``cuda``, or for ``auto`` whichever this machine has (CUDA first)."""
    if device == Device.CPU:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if device == Device.CUDA:
        raise DeviceUnavailable(
            "the spec asks for device 'cuda' but this worker has no CUDA GPU visible to PyTorch "
            f"(torch {torch.__version__}); use 'auto' or 'cpu', or run it on a GPU worker"
        )
    return "cpu"


def gpu_names() -> list[str]:
    """The CUDA GPUs PyTorch sees, by name (``[]`` on a machine without one)."""
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]


def describe_device(device: str) -> str:
    """``cpu``, or ``cuda:<index> (<name>)`` of the GPU that ``cuda`` means in this process."""
    if not device.startswith("cuda"):
        return device
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def seed(seed: int) -> None:
    """Seed torch's global generators (the learners also seed their own)."""
    torch.manual_seed(seed)


def set_threads(threads: int) -> None:
    """Cap torch's intra-op threads (process-wide; a worker process runs one training at a time)."""
    torch.set_num_threads(threads)
