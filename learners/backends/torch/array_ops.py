"""The vector MPE engine's array operations on torch tensors (``learners.envs.vector.arrays``).

Each operation keeps NumPy's semantics (the engine's NumPy path is the reference): ``softplus`` is
``logaddexp(0, x)`` with no linear cut-off, ``argsort_stable`` breaks ties by index, ``clip`` with
one bound leaves the other side open. Every array is made on the one device given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

_DTYPES = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.bool_): torch.bool,
}


class TorchArrayOps:
    """``ArrayOps`` on torch tensors on ``device``."""

    float32 = torch.float32
    float64 = torch.float64
    int64 = torch.int64
    bool_ = torch.bool
    sqrt = staticmethod(torch.sqrt)
    square = staticmethod(torch.square)
    exp = staticmethod(torch.exp)
    abs = staticmethod(torch.abs)
    where = staticmethod(torch.where)
    permute = staticmethod(torch.permute)

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self._consts: dict[int, tuple[np.ndarray[Any, Any], torch.Tensor]] = {}

    def _dtype(self, dtype: Any) -> torch.dtype | None:
        if dtype is None or isinstance(dtype, torch.dtype):
            return dtype
        return _DTYPES[np.dtype(dtype)]

    def asarray(self, value: Any, dtype: Any = None) -> torch.Tensor:
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            value = value.copy()
        return torch.as_tensor(value, dtype=self._dtype(dtype), device=self.device)

    def const(self, array: np.ndarray[Any, Any]) -> torch.Tensor:
        # Keyed by identity, holding the array so its id is never reused for another.
        held = self._consts.get(id(array))
        if held is None:
            held = (array, self.asarray(array))
            self._consts[id(array)] = held
        return held[1]

    def to_numpy(self, array: torch.Tensor) -> np.ndarray[Any, Any]:
        converted: np.ndarray[Any, Any] = array.detach().cpu().numpy()
        return converted

    def zeros(self, shape: Sequence[int], dtype: Any = torch.float64) -> torch.Tensor:
        return torch.zeros(tuple(shape), dtype=self._dtype(dtype), device=self.device)

    def empty(self, shape: Sequence[int], dtype: Any = torch.float64) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=self._dtype(dtype), device=self.device)

    def arange(self, n: int) -> torch.Tensor:
        return torch.arange(n, device=self.device)

    def clip(self, x: torch.Tensor, low: float | None, high: float | None) -> torch.Tensor:
        return torch.clamp(x, low, high)

    def softplus(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logaddexp(torch.zeros_like(x), x)

    def concatenate(self, arrays: Sequence[torch.Tensor], axis: int = 0) -> torch.Tensor:
        return torch.cat(list(arrays), dim=axis)

    def contiguous(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous()

    def astype(self, x: torch.Tensor, dtype: Any) -> torch.Tensor:
        return x.to(self._dtype(dtype))

    def amin(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.amin(x, dim=axis)

    def argsort_stable(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.argsort(x, dim=axis, stable=True)

    def take_along_axis(self, x: torch.Tensor, index: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.take_along_dim(x, index, dim=axis)

    def copy_into(self, out: torch.Tensor, source: torch.Tensor) -> None:
        out.copy_(source)

    def copy_where(self, out: torch.Tensor, source: torch.Tensor, mask: Any) -> None:
        out.copy_(torch.where(self.asarray(mask), source, out))

    def flatnonzero(self, mask: Any) -> np.ndarray[Any, Any]:
        if isinstance(mask, torch.Tensor):
            mask = self.to_numpy(mask)
        return np.flatnonzero(mask)
