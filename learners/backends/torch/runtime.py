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


def seed(seed: int) -> None:
    """Seed torch's global generators (the learners also seed their own)."""
    torch.manual_seed(seed)


def set_threads(threads: int) -> None:
    """Cap torch's intra-op threads (process-wide; a worker process runs one training at a time)."""
    torch.set_num_threads(threads)
