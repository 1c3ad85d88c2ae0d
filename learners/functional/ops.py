"""The small array interface every learner's math is written against.

The losses, distributions and TD targets in ``learners.functional`` are written once, as pure
functions over an ``Ops`` object, and each backend (NumPy, PyTorch, TensorFlow, MindSpore) supplies
one implementation of it. The NumPy one is the oracle the others are tested against.

The interface is deliberately small and portable: elementwise math, reductions with an axis,
``where``/``clip``/``minimum``/``maximum``, ``stop_gradient``, ``expand_dims``, ``log_softmax`` +
``gather_last`` for categorical distributions, and ``argmax``. The arithmetic operators (``+ - *
/ **``, unary ``-``, ``< > <= >=``) are the arrays' own: every supported framework overloads them
elementwise with broadcasting, so the shared math reads like the paper. Nothing here relies on
framework-specific indexing (boolean-mask assignment, fancy indexing): masks are applied by
``where`` and products.

Conventions every implementation keeps:

- ``axis`` is an int, a tuple of ints, or ``None`` (all axes); negative axes count from the end.
- Scalars (Python floats) are accepted wherever the signature says ``A | float``.
- Comparisons return the framework's boolean arrays; ``where`` takes them as its condition.
- ``gather_last(x, index)`` picks ``x[..., index[...]]``: ``index`` has ``x``'s shape without the
  last axis and holds integers.
"""

from __future__ import annotations

from typing import Any, Protocol, Self, TypeVar

from numpy.typing import NDArray

Axis = int | tuple[int, ...] | None


class ArrayLike(Protocol):
    """What the shared math needs of an array besides ``Ops``: elementwise operators and a shape.

    NumPy arrays, ``torch.Tensor``, ``tf.Tensor`` and MindSpore ``Tensor`` all satisfy it.
    """

    @property
    def shape(self) -> Any: ...

    def __add__(self, other: Any, /) -> Self: ...
    def __radd__(self, other: Any, /) -> Self: ...
    def __sub__(self, other: Any, /) -> Self: ...
    def __rsub__(self, other: Any, /) -> Self: ...
    def __mul__(self, other: Any, /) -> Self: ...
    def __rmul__(self, other: Any, /) -> Self: ...
    def __truediv__(self, other: Any, /) -> Self: ...
    def __rtruediv__(self, other: Any, /) -> Self: ...
    def __pow__(self, other: Any, /) -> Self: ...
    def __neg__(self) -> Self: ...
    def __lt__(self, other: Any, /) -> Self: ...
    def __gt__(self, other: Any, /) -> Self: ...
    def __le__(self, other: Any, /) -> Self: ...
    def __ge__(self, other: Any, /) -> Self: ...


A = TypeVar("A", bound=ArrayLike)


class Ops(Protocol[A]):
    """One backend's array operations. ``A`` is its array type."""

    # -- conversion (host <-> backend); used by learners at the edges and by the parity tests
    def asarray(self, x: NDArray[Any]) -> A:
        """A backend array holding ``x``'s values (float arrays become float32)."""
        ...

    def to_numpy(self, x: A) -> NDArray[Any]:
        """``x``'s values on the host, detached from any gradient tape."""
        ...

    def item(self, x: A) -> float:
        """The value of a one-element array as a Python float."""
        ...

    # -- elementwise
    def exp(self, x: A) -> A: ...
    def log(self, x: A) -> A: ...
    def sqrt(self, x: A) -> A: ...
    def abs(self, x: A) -> A: ...
    def tanh(self, x: A) -> A: ...

    def minimum(self, x: A, y: A | float) -> A:
        """Elementwise minimum, broadcasting."""
        ...

    def maximum(self, x: A, y: A | float) -> A:
        """Elementwise maximum, broadcasting."""
        ...

    def clip(self, x: A, low: float, high: float) -> A:
        """``x`` limited to ``[low, high]``; the gradient is zero where clipped."""
        ...

    def where(self, condition: A, x: A | float, y: A | float) -> A:
        """``x`` where ``condition`` holds, else ``y``; the unselected branch gets no gradient."""
        ...

    def equal(self, x: A, y: A) -> A:
        """Elementwise ``x == y`` as a boolean array (used on integer action indices)."""
        ...

    def full_like(self, x: A, value: float) -> A:
        """An array shaped and typed like ``x`` filled with ``value``; no gradient."""
        ...

    def as_float(self, x: A) -> A:
        """A boolean (or integer) array as float32 (1.0 / 0.0 for booleans)."""
        ...

    def stop_gradient(self, x: A) -> A:
        """``x`` with no gradient flowing back through it."""
        ...

    def expand_dims(self, x: A, axis: int) -> A:
        """``x`` with a new axis of size 1 at ``axis`` (for broadcasting)."""
        ...

    # -- reductions
    def sum(self, x: A, axis: Axis = None, keepdims: bool = False) -> A: ...
    def mean(self, x: A, axis: Axis = None, keepdims: bool = False) -> A: ...
    def max(self, x: A, axis: Axis = None, keepdims: bool = False) -> A: ...
    def min(self, x: A, axis: Axis = None, keepdims: bool = False) -> A: ...

    def argmax(self, x: A, axis: int = -1) -> A:
        """Index of the largest entry along ``axis`` (ties: the first), as integers."""
        ...

    # -- categorical distributions
    def log_softmax(self, logits: A, axis: int = -1) -> A:
        """``logits - logsumexp(logits)`` along ``axis``, computed stably."""
        ...

    def gather_last(self, x: A, index: A) -> A:
        """``x[..., index]`` per leading position: shape ``x.shape[:-1]``."""
        ...
