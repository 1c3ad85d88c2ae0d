"""The TensorFlow implementation of ``learners.functional.ops.Ops``.

Every function is a thin call into ``tf`` with the interface's conventions (``axis`` may be None or
a tuple; Python floats are accepted where the protocol allows them). It works both eagerly and
inside a ``tf.function``: nothing here reads a tensor's value on the host except ``to_numpy`` and
``item``, which the learners call only outside compiled code.

Two places need care to agree with the other backends:

- ``where`` with Python-float branches: ``tf.where`` does not promote a Python scalar to the
  other branch's dtype, so scalars become constants of that dtype (float32 when both are
  scalars) and the condition's shape.
- ``argmax`` returns int64 and picks the first maximum, as NumPy and torch do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from numpy.typing import NDArray

from learners.functional.ops import Axis

Tensor = tf.Tensor


def _axis(axis: Axis) -> Any:
    return list(axis) if isinstance(axis, tuple) else axis


class TensorFlowOps:
    """``Ops`` over ``tf.Tensor`` (float32 throughout)."""

    def __init__(self, device: str = "/CPU:0") -> None:
        self.device = device

    def asarray(self, x: NDArray[Any]) -> Tensor:
        arr = np.asarray(x)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        with tf.device(self.device):
            return tf.convert_to_tensor(arr)

    def to_numpy(self, x: Tensor) -> NDArray[Any]:
        return np.asarray(tf.stop_gradient(x).numpy())

    def item(self, x: Tensor) -> float:
        return float(np.asarray(tf.reshape(x, ()).numpy()))

    def exp(self, x: Tensor) -> Tensor:
        return tf.exp(x)

    def log(self, x: Tensor) -> Tensor:
        return tf.math.log(x)

    def sqrt(self, x: Tensor) -> Tensor:
        return tf.sqrt(x)

    def abs(self, x: Tensor) -> Tensor:
        return tf.abs(x)

    def tanh(self, x: Tensor) -> Tensor:
        return tf.tanh(x)

    def minimum(self, x: Tensor, y: Tensor | float) -> Tensor:
        return tf.minimum(x, tf.cast(y, x.dtype))

    def maximum(self, x: Tensor, y: Tensor | float) -> Tensor:
        return tf.maximum(x, tf.cast(y, x.dtype))

    def clip(self, x: Tensor, low: float, high: float) -> Tensor:
        return tf.clip_by_value(x, low, high)

    def where(self, condition: Tensor, x: Tensor | float, y: Tensor | float) -> Tensor:
        tensors = [v for v in (x, y) if isinstance(v, tf.Tensor | tf.Variable)]
        dtype = tensors[0].dtype if tensors else tf.float32
        shape = tf.shape(condition)
        if not isinstance(x, tf.Tensor | tf.Variable):
            x = tf.fill(shape, tf.constant(x, dtype))
        if not isinstance(y, tf.Tensor | tf.Variable):
            y = tf.fill(shape, tf.constant(y, dtype))
        return tf.where(condition, x, y)

    def equal(self, x: Tensor, y: Tensor) -> Tensor:
        return tf.equal(x, tf.cast(y, x.dtype))

    def full_like(self, x: Tensor, value: float) -> Tensor:
        return tf.fill(tf.shape(x), tf.constant(value, tf.float32))  # float32, as the protocol says

    def as_float(self, x: Tensor) -> Tensor:
        return tf.cast(x, tf.float32)

    def stop_gradient(self, x: Tensor) -> Tensor:
        return tf.stop_gradient(x)

    def expand_dims(self, x: Tensor, axis: int) -> Tensor:
        return tf.expand_dims(x, axis)

    def sum(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return tf.reduce_sum(x, axis=_axis(axis), keepdims=keepdims)

    def mean(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return tf.reduce_mean(x, axis=_axis(axis), keepdims=keepdims)

    def max(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return tf.reduce_max(x, axis=_axis(axis), keepdims=keepdims)

    def min(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return tf.reduce_min(x, axis=_axis(axis), keepdims=keepdims)

    def argmax(self, x: Tensor, axis: int = -1) -> Tensor:
        return tf.argmax(x, axis=axis, output_type=tf.int64)

    def log_softmax(self, logits: Tensor, axis: int = -1) -> Tensor:
        return tf.nn.log_softmax(logits, axis=axis)

    def gather_last(self, x: Tensor, index: Tensor) -> Tensor:
        index = tf.cast(index, tf.int64)
        return tf.gather(x, index[..., None], axis=-1, batch_dims=len(index.shape))[..., 0]
