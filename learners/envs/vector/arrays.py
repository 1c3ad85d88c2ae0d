"""The array operations the vector engine's step is written in, over NumPy or over torch tensors.

Not to be confused with ``learners.functional.ops.Ops``, the tensor operations the learners' losses
are written in (with gradients, per backend): ``ArrayOps`` are NumPy-named operations on plain
arrays, with no gradient, for stepping environments.

The step (``world.py``, ``scenarios.py``, ``competitive.py``) calls NumPy-named operations on an
``ArrayOps`` object instead of ``np.*``, so the same code steps a batch of worlds held as NumPy
arrays on the host or as torch tensors on any torch device (a GPU run then never copies the world
back to the host). Each operation has NumPy's semantics in both, which
tests/learners/envs/test_vector_torch.py holds to: from the same state under the same actions the
two step to the same numbers.

``NUMPY`` is NumPy itself where its function already has the name (no wrapper, no overhead); torch's
operations live in ``learners.backends.torch.array_ops`` and are imported only when a torch device
is asked for (learners import a framework only from its backend package). ``ops_of(array)`` picks
the operations of an array's library, so helpers take arrays, not an extra argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, Protocol, TypeAlias, cast

import numpy as np

Array: TypeAlias = Any
"""A NumPy array or a torch tensor (the step code is written once for both)."""


class ArrayOps(Protocol):
    """NumPy-named array operations with NumPy's semantics."""

    float32: Any
    float64: Any
    int64: Any
    bool_: Any

    def asarray(self, value: Any, dtype: Any = None) -> Array:
        """``value`` (an array of either library, a list, a scalar) as this library's array."""

    def const(self, array: np.ndarray[Any, Any]) -> Array:
        """A fixed NumPy array as this library's array (converted once, then reused)."""

    def to_numpy(self, array: Array) -> np.ndarray[Any, Any]:
        """The array on the host as NumPy (a copy for a device tensor)."""

    def zeros(self, shape: Sequence[int], dtype: Any) -> Array: ...

    def empty(self, shape: Sequence[int], dtype: Any) -> Array: ...

    def arange(self, n: int) -> Array: ...

    def sqrt(self, x: Array) -> Array: ...

    def square(self, x: Array) -> Array: ...

    def exp(self, x: Array) -> Array: ...

    def abs(self, x: Array) -> Array: ...

    def where(self, condition: Array, x: Any, y: Any) -> Array: ...

    def clip(self, x: Array, low: float | None, high: float | None) -> Array: ...

    def softplus(self, x: Array) -> Array:
        """``log(1 + exp(x))`` computed as NumPy's ``logaddexp(0, x)`` (no linear cut-off)."""

    def concatenate(self, arrays: Sequence[Array], axis: int = 0) -> Array: ...

    def permute(self, x: Array, axes: Sequence[int]) -> Array:
        """NumPy's ``transpose(x, axes)``."""

    def contiguous(self, x: Array) -> Array: ...

    def astype(self, x: Array, dtype: Any) -> Array: ...

    def amin(self, x: Array, axis: int) -> Array: ...

    def argsort_stable(self, x: Array, axis: int) -> Array: ...

    def take_along_axis(self, x: Array, index: Array, axis: int) -> Array: ...

    def copy_into(self, out: Array, source: Array) -> None:
        """Write ``source`` into ``out`` (casting as NumPy's ``copyto`` does)."""

    def copy_where(self, out: Array, source: Array, mask: np.ndarray[Any, Any]) -> None:
        """Write ``source`` into ``out`` where the host boolean ``mask`` (broadcast to ``out``)
        is true: NumPy's ``copyto(out, source, where=mask)``."""

    def flatnonzero(self, mask: Array) -> np.ndarray[Any, Any]:
        """The host indices where ``mask`` is true."""


class NumpyArrayOps:
    """``ArrayOps`` on NumPy arrays: NumPy's own functions, wrapped only where the name differs."""

    float32 = np.float32
    float64 = np.float64
    int64 = np.int64
    bool_ = np.bool_
    zeros = staticmethod(np.zeros)
    empty = staticmethod(np.empty)
    arange = staticmethod(np.arange)
    sqrt = staticmethod(np.sqrt)
    square = staticmethod(np.square)
    exp = staticmethod(np.exp)
    abs = staticmethod(np.abs)
    where = staticmethod(np.where)
    clip = staticmethod(np.clip)
    concatenate = staticmethod(np.concatenate)
    permute = staticmethod(np.transpose)
    contiguous = staticmethod(np.ascontiguousarray)
    take_along_axis = staticmethod(np.take_along_axis)
    copy_into = staticmethod(np.copyto)
    flatnonzero = staticmethod(np.flatnonzero)

    @staticmethod
    def asarray(value: Any, dtype: Any = None) -> Array:
        return np.asarray(value, dtype)

    @staticmethod
    def const(array: np.ndarray[Any, Any]) -> Array:
        return array

    @staticmethod
    def to_numpy(array: Array) -> np.ndarray[Any, Any]:
        return np.asarray(array)

    @staticmethod
    def softplus(x: Array) -> Array:
        return np.logaddexp(0, x)

    @staticmethod
    def copy_where(out: Array, source: Array, mask: np.ndarray[Any, Any]) -> None:
        np.copyto(out, source, where=mask)

    @staticmethod
    def astype(x: Array, dtype: Any) -> Array:
        return x.astype(dtype)

    @staticmethod
    def amin(x: Array, axis: int) -> Array:
        return np.min(x, axis=axis)

    @staticmethod
    def argsort_stable(x: Array, axis: int) -> Array:
        return np.argsort(x, axis=axis, kind="stable")


# Cast: NumPy's and torch's own signatures are wider than the protocol's (overloads, dtypes);
# the behaviour the engine relies on is what the parity tests hold.
NUMPY: ArrayOps = cast(ArrayOps, NumpyArrayOps())


@cache
def torch_ops(device: str) -> ArrayOps:
    """The operations on torch tensors on ``device`` (``cpu``, ``cuda``, ``cuda:1``...)."""
    from learners.backends.torch.array_ops import TorchArrayOps

    return cast(ArrayOps, TorchArrayOps(device))


def ops_for(device: str | None) -> ArrayOps:
    """NumPy for ``None`` (or ``"numpy"``); torch on ``device`` otherwise."""
    if device is None or device == "numpy":
        return NUMPY
    return torch_ops(device)


def ops_of(array: Array) -> ArrayOps:
    """The operations of ``array``'s library (and, for a tensor, its device)."""
    if isinstance(array, np.ndarray):
        return NUMPY
    return torch_ops(str(array.device))
