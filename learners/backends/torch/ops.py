"""The PyTorch implementation of ``learners.functional.ops.Ops``.

Every function is a thin call into torch with the interface's conventions (``axis`` may be None or a
tuple; scalars are accepted where the protocol allows them). Arrays stay on whatever device they are
on; ``asarray`` places new ones on ``device``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from learners.functional.ops import Axis

Tensor = torch.Tensor


class TorchOps:
    """``Ops`` over ``torch.Tensor``."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)

    def asarray(self, x: NDArray[Any]) -> Tensor:
        arr = np.asarray(x)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        return torch.as_tensor(arr, device=self.device)

    def to_numpy(self, x: Tensor) -> NDArray[Any]:
        return x.detach().cpu().numpy()

    def item(self, x: Tensor) -> float:
        return float(x.detach().reshape(()).item())

    def exp(self, x: Tensor) -> Tensor:
        return torch.exp(x)

    def log(self, x: Tensor) -> Tensor:
        return torch.log(x)

    def sqrt(self, x: Tensor) -> Tensor:
        return torch.sqrt(x)

    def abs(self, x: Tensor) -> Tensor:
        return torch.abs(x)

    def tanh(self, x: Tensor) -> Tensor:
        return torch.tanh(x)

    def minimum(self, x: Tensor, y: Tensor | float) -> Tensor:
        if isinstance(y, Tensor):
            return torch.minimum(x, y)
        return torch.clamp(x, max=y)

    def maximum(self, x: Tensor, y: Tensor | float) -> Tensor:
        if isinstance(y, Tensor):
            return torch.maximum(x, y)
        return torch.clamp(x, min=y)

    def clip(self, x: Tensor, low: float, high: float) -> Tensor:
        return torch.clamp(x, low, high)

    def where(self, condition: Tensor, x: Tensor | float, y: Tensor | float) -> Tensor:
        return torch.where(condition, x, y)

    def equal(self, x: Tensor, y: Tensor) -> Tensor:
        return torch.eq(x, y)

    def full_like(self, x: Tensor, value: float) -> Tensor:
        return torch.full_like(x, value, dtype=torch.float32)

    def as_float(self, x: Tensor) -> Tensor:
        return x.to(torch.float32)

    def stop_gradient(self, x: Tensor) -> Tensor:
        return x.detach()

    def expand_dims(self, x: Tensor, axis: int) -> Tensor:
        return x.unsqueeze(axis)

    def sum(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        if axis is None:
            return x.sum() if not keepdims else x.sum().reshape([1] * x.dim())
        return x.sum(dim=axis, keepdim=keepdims)

    def mean(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        if axis is None:
            return x.mean() if not keepdims else x.mean().reshape([1] * x.dim())
        return x.mean(dim=axis, keepdim=keepdims)

    def max(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        if axis is None:
            return x.amax() if not keepdims else x.amax().reshape([1] * x.dim())
        return torch.amax(x, dim=axis, keepdim=keepdims)

    def min(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        if axis is None:
            return x.amin() if not keepdims else x.amin().reshape([1] * x.dim())
        return torch.amin(x, dim=axis, keepdim=keepdims)

    def argmax(self, x: Tensor, axis: int = -1) -> Tensor:
        return torch.argmax(x, dim=axis)

    def log_softmax(self, logits: Tensor, axis: int = -1) -> Tensor:
        return torch.log_softmax(logits, dim=axis)

    def gather_last(self, x: Tensor, index: Tensor) -> Tensor:
        return torch.gather(x, -1, index.long().unsqueeze(-1)).squeeze(-1)
