"""Device choice and seeding for PyTorch runs."""

from __future__ import annotations

import torch


def has_gpu() -> bool:
    """Whether PyTorch sees a CUDA GPU (``learners.backends.resolve_device`` picks it)."""
    return bool(torch.cuda.is_available())


def no_gpu_reason() -> str:
    return (
        "this worker has no CUDA GPU visible to PyTorch "
        f"(torch {torch.__version__}); use 'auto' or 'cpu', or run it on a GPU worker"
    )


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
