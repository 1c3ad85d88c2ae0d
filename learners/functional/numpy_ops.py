"""The NumPy implementation of ``Ops``: the oracle every backend's math is tested against.

It computes in float64 where that is free (the reductions and ``log_softmax``), so that the parity
tests measure the backends' float32 error against something more exact, not against another float32
rounding. It has no gradients: ``stop_gradient`` is the identity.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.functional.ops import Axis

Array = NDArray[Any]


class NumpyOps:
    """``Ops`` over ``numpy.ndarray``."""

    def asarray(self, x: Array) -> Array:
        arr = np.asarray(x)
        return arr.astype(np.float64) if arr.dtype.kind == "f" else arr

    def to_numpy(self, x: Array) -> Array:
        return np.asarray(x)

    def item(self, x: Array) -> float:
        return float(np.asarray(x).reshape(()))

    def exp(self, x: Array) -> Array:
        return np.exp(x)

    def log(self, x: Array) -> Array:
        return np.log(x)

    def sqrt(self, x: Array) -> Array:
        return np.sqrt(x)

    def abs(self, x: Array) -> Array:
        return np.abs(x)

    def tanh(self, x: Array) -> Array:
        return np.tanh(x)

    def minimum(self, x: Array, y: Array | float) -> Array:
        return np.minimum(x, y)

    def maximum(self, x: Array, y: Array | float) -> Array:
        return np.maximum(x, y)

    def clip(self, x: Array, low: float, high: float) -> Array:
        return np.clip(x, low, high)

    def where(self, condition: Array, x: Array | float, y: Array | float) -> Array:
        return np.where(condition, x, y)

    def equal(self, x: Array, y: Array) -> Array:
        return np.equal(x, y)

    def full_like(self, x: Array, value: float) -> Array:
        return np.full_like(x, value, dtype=np.float64)

    def as_float(self, x: Array) -> Array:
        return np.asarray(x, dtype=np.float64)

    def stop_gradient(self, x: Array) -> Array:
        return x

    def expand_dims(self, x: Array, axis: int) -> Array:
        return np.expand_dims(x, axis)

    def sum(self, x: Array, axis: Axis = None, keepdims: bool = False) -> Array:
        return np.asarray(np.sum(x, axis=axis, keepdims=keepdims))

    def mean(self, x: Array, axis: Axis = None, keepdims: bool = False) -> Array:
        return np.asarray(np.mean(x, axis=axis, keepdims=keepdims))

    def max(self, x: Array, axis: Axis = None, keepdims: bool = False) -> Array:
        return np.asarray(np.max(x, axis=axis, keepdims=keepdims))

    def min(self, x: Array, axis: Axis = None, keepdims: bool = False) -> Array:
        return np.asarray(np.min(x, axis=axis, keepdims=keepdims))

    def argmax(self, x: Array, axis: int = -1) -> Array:
        return np.asarray(np.argmax(x, axis=axis))

    def log_softmax(self, logits: Array, axis: int = -1) -> Array:
        shifted = logits - np.max(logits, axis=axis, keepdims=True)
        return np.asarray(shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True)))

    def gather_last(self, x: Array, index: Array) -> Array:
        picked = np.take_along_axis(x, np.asarray(index, dtype=np.int64)[..., None], axis=-1)
        return np.asarray(picked[..., 0])
