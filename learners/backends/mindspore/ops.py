"""The MindSpore implementation of ``learners.functional.ops.Ops``.

``MindSporeOps`` is a ``jit_class``: the shared math calls it from inside compiled graphs (the
learners' whole update is one ``mindspore.jit`` graph) as well as eagerly, with the same results.
Every method is a thin call into ``mindspore.ops`` with the interface's conventions. Two choices
keep the gradients identical to PyTorch's:

- ``minimum``/``maximum`` against a Python scalar are clamps, as in ``TorchOps``: a clamp passes the
  whole gradient at a tie, where an elementwise minimum of two tensors splits it in half (both
  frameworks split the same way for two tensors);
- ``clip`` is ``clamp`` with both bounds inclusive, which is where torch's clamp passes gradient.

The transcendental functions (``exp``, ``log``, ``tanh``, ``sigmoid``, the softmaxes) are
computed in float64 and rounded back. MindSpore 2.10's float32 CPU kernels for them are fast
approximations: ``tanh(5.0)`` comes out as 1.0000098 (above 1, and 1e-4 off), ``log`` is up to
~5,000 float32 ulps off and ``exp`` ~60, where PyTorch's and NumPy's are correctly rounded. That
error alone exceeds the 1e-5 the backends are held to. Their float64 kernels are correctly rounded,
so one cast in and one out gives the same float32 numbers as PyTorch (the networks use the same
functions, ``tanh64`` and ``sigmoid64``, for their activations; the names differ from the methods'
because graph mode resolves a bare name inside a method to the method of that name).

``asarray``, ``to_numpy`` and ``item`` cross the host boundary and are never called inside a graph.
"""

from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from numpy.typing import NDArray

from learners.backends.mindspore.runtime import configure
from learners.functional.ops import Axis

configure()


def exp64(x: Tensor) -> Tensor:
    """``exp`` rounded from float64 (see the module docstring)."""
    return ops.exp(x.astype(ms.float64)).astype(x.dtype)


def log64(x: Tensor) -> Tensor:
    """``log`` rounded from float64."""
    return ops.log(x.astype(ms.float64)).astype(x.dtype)


def tanh64(x: Tensor) -> Tensor:
    """``tanh`` rounded from float64."""
    return ops.tanh(x.astype(ms.float64)).astype(x.dtype)


def sigmoid64(x: Tensor) -> Tensor:
    """``sigmoid`` rounded from float64."""
    return ops.sigmoid(x.astype(ms.float64)).astype(x.dtype)


def elu64(x: Tensor) -> Tensor:
    """``elu`` rounded from float64 (its float32 kernel shares ``exp``'s approximation)."""
    return ops.elu(x.astype(ms.float64)).astype(x.dtype)


def softmax64(x: Tensor, axis: int = -1) -> Tensor:
    """``softmax`` rounded from float64 (its float64 gradient kernel is exact enough)."""
    return ops.softmax(x.astype(ms.float64), axis).astype(x.dtype)


def log_softmax64(x: Tensor, axis: int = -1) -> Tensor:
    """``x - logsumexp(x)`` along ``axis``, computed in float64 from ``exp``, ``log`` and ``sum``.

    Written out rather than ``ops.log_softmax``: MindSpore's LogSoftmax *gradient* kernel is
    approximate in float64 too (gradients ~2e-6 off, 60 times PyTorch's float32 error). The shift
    by the maximum carries no gradient (the result does not depend on it)."""
    x64 = x.astype(ms.float64)
    shifted = x64 - ops.stop_gradient(ops.amax(x64, axis, True))
    return (shifted - ops.log(ops.sum(ops.exp(shifted), axis, True))).astype(x.dtype)


@ms.jit_class
class MindSporeOps:
    """``Ops`` over ``mindspore.Tensor``."""

    def asarray(self, x: NDArray[Any]) -> Tensor:
        arr = np.asarray(x)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        elif arr.dtype == np.bool_:
            return Tensor(arr, ms.bool_)
        return Tensor(np.ascontiguousarray(arr))

    def to_numpy(self, x: Tensor) -> NDArray[Any]:
        return np.asarray(x.asnumpy())

    def item(self, x: Tensor) -> float:
        return float(x.asnumpy().reshape(()))

    def exp(self, x: Tensor) -> Tensor:
        return exp64(x)

    def log(self, x: Tensor) -> Tensor:
        return log64(x)

    def sqrt(self, x: Tensor) -> Tensor:
        return ops.sqrt(x)

    def abs(self, x: Tensor) -> Tensor:
        return ops.abs(x)

    def tanh(self, x: Tensor) -> Tensor:
        return tanh64(x)

    def minimum(self, x: Tensor, y: Tensor | float) -> Tensor:
        if isinstance(y, (int, float)):
            return ops.clamp(x, max=y)
        return ops.minimum(x, y)

    def maximum(self, x: Tensor, y: Tensor | float) -> Tensor:
        if isinstance(y, (int, float)):
            return ops.clamp(x, min=y)
        return ops.maximum(x, y)

    def clip(self, x: Tensor, low: float, high: float) -> Tensor:
        return ops.clamp(x, low, high)

    def where(self, condition: Tensor, x: Tensor | float, y: Tensor | float) -> Tensor:
        return ops.where(condition, x, y)

    def equal(self, x: Tensor, y: Tensor) -> Tensor:
        return ops.equal(x, y)

    def full_like(self, x: Tensor, value: float) -> Tensor:
        return ops.full_like(x, value, dtype=ms.float32)

    def as_float(self, x: Tensor) -> Tensor:
        return x.astype(ms.float32)

    def stop_gradient(self, x: Tensor) -> Tensor:
        return ops.stop_gradient(x)

    def expand_dims(self, x: Tensor, axis: int) -> Tensor:
        return ops.expand_dims(x, axis)

    def sum(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return ops.sum(x, axis, keepdims)

    def mean(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return ops.mean(x, axis, keepdims)

    def max(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return ops.amax(x, _axes(x, axis), keepdims)

    def min(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return ops.amin(x, _axes(x, axis), keepdims)

    def argmax(self, x: Tensor, axis: int = -1) -> Tensor:
        return ops.argmax(x, axis)

    def log_softmax(self, logits: Tensor, axis: int = -1) -> Tensor:
        return log_softmax64(logits, axis)

    def gather_last(self, x: Tensor, index: Tensor) -> Tensor:
        picked = ops.gather_elements(x, -1, ops.expand_dims(index.astype(ms.int64), -1))
        return ops.squeeze(picked, -1)


def _axes(x: Tensor, axis: Axis) -> Any:
    """``amax``/``amin`` read an empty tuple as "every axis"; ``None`` is spelled that way."""
    if axis is None:
        return ()
    return axis
