"""Every ``Ops`` method of every built backend against the NumPy oracle."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from learners.functional.numpy_ops import NumpyOps


def close(actual: Any, expected: Any, rtol: float = 2e-5, atol: float = 2e-6) -> None:
    np.testing.assert_allclose(
        np.asarray(actual, dtype=np.float64),
        np.asarray(expected, dtype=np.float64),
        rtol=rtol,
        atol=atol,
    )


def both(ops: Any, np_ops: NumpyOps, name: str, *arrays: np.ndarray, **kwargs: Any) -> None:
    """Call ``name`` on the backend and on the oracle with the same inputs; compare."""
    got = getattr(ops, name)(*(ops.asarray(a) for a in arrays), **kwargs)
    want = getattr(np_ops, name)(*(np_ops.asarray(a) for a in arrays), **kwargs)
    assert tuple(ops.to_numpy(got).shape) == np.shape(want), name
    close(ops.to_numpy(got), want)


@pytest.mark.parametrize("name", ["exp", "abs", "tanh"])
def test_elementwise(ops: Any, np_ops: NumpyOps, rng: np.random.Generator, name: str) -> None:
    both(ops, np_ops, name, rng.normal(size=(4, 3, 5)).astype(np.float32))


@pytest.mark.parametrize("name", ["log", "sqrt"])
def test_elementwise_positive(
    ops: Any, np_ops: NumpyOps, rng: np.random.Generator, name: str
) -> None:
    both(ops, np_ops, name, rng.uniform(0.1, 5.0, size=(4, 3, 5)).astype(np.float32))


@pytest.mark.parametrize("name", ["minimum", "maximum"])
def test_binary_with_array_and_scalar(
    ops: Any, np_ops: NumpyOps, rng: np.random.Generator, name: str
) -> None:
    x = rng.normal(size=(6, 3)).astype(np.float32)
    y = rng.normal(size=(1, 3)).astype(np.float32)  # broadcasts
    both(ops, np_ops, name, x, y)
    got = getattr(ops, name)(ops.asarray(x), 0.25)
    close(ops.to_numpy(got), getattr(np_ops, name)(x, 0.25))


def test_clip(ops: Any, np_ops: NumpyOps, rng: np.random.Generator) -> None:
    x = rng.normal(size=(10, 2)).astype(np.float32)
    got = ops.clip(ops.asarray(x), -0.3, 0.7)
    close(ops.to_numpy(got), np_ops.clip(x, -0.3, 0.7))
    assert ops.to_numpy(got).max() <= 0.7 + 1e-7 and ops.to_numpy(got).min() >= -0.3 - 1e-7


def test_where_arrays_and_scalars(ops: Any, np_ops: NumpyOps, rng: np.random.Generator) -> None:
    x = rng.normal(size=(5, 4)).astype(np.float32)
    y = rng.normal(size=(5, 4)).astype(np.float32)
    cond = x > y
    got = ops.where(ops.asarray(x) > ops.asarray(y), ops.asarray(x), ops.asarray(y))
    close(ops.to_numpy(got), np.where(cond, x, y))
    got = ops.where(ops.asarray(x) > 0.0, 1.0, 0.5)
    close(ops.to_numpy(got), np.where(x > 0.0, 1.0, 0.5))
    got = ops.where(ops.asarray(x) > 0.0, ops.asarray(x), 0.0)
    close(ops.to_numpy(got), np.where(x > 0.0, x, 0.0))


def test_equal_full_like_as_float(ops: Any, rng: np.random.Generator) -> None:
    a = rng.integers(0, 3, size=(7, 4))
    b = rng.integers(0, 3, size=(7, 4))
    eq = ops.equal(ops.asarray(a), ops.asarray(b))
    np.testing.assert_array_equal(ops.to_numpy(ops.as_float(eq)), (a == b).astype(np.float32))
    full = ops.full_like(ops.asarray(rng.normal(size=(2, 3)).astype(np.float32)), 0.75)
    close(ops.to_numpy(full), np.full((2, 3), 0.75))


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(
    ops: Any, np_ops: NumpyOps, rng: np.random.Generator, name: str, axis: Any, keepdims: bool
) -> None:
    x = rng.normal(size=(4, 3, 5)).astype(np.float32)
    both(ops, np_ops, name, x, axis=axis, keepdims=keepdims)


def test_argmax_and_item(ops: Any, rng: np.random.Generator) -> None:
    x = rng.normal(size=(6, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(ops.to_numpy(ops.argmax(ops.asarray(x), -1)), x.argmax(-1))
    np.testing.assert_array_equal(ops.to_numpy(ops.argmax(ops.asarray(x), 1)), x.argmax(1))
    assert ops.item(ops.sum(ops.asarray(x))) == pytest.approx(float(x.sum()), rel=1e-5)


def test_log_softmax_is_stable(ops: Any, np_ops: NumpyOps, rng: np.random.Generator) -> None:
    x = rng.normal(size=(8, 5)).astype(np.float32) * 30.0 + 500.0  # would overflow a naive exp
    both(ops, np_ops, "log_softmax", x, axis=-1)
    got = ops.to_numpy(ops.log_softmax(ops.asarray(x), -1))
    assert np.isfinite(got).all()
    close(np.exp(got).sum(-1), np.ones(8), atol=1e-5)


def test_gather_last(ops: Any, np_ops: NumpyOps, rng: np.random.Generator) -> None:
    x = rng.normal(size=(4, 3, 6)).astype(np.float32)
    index = rng.integers(0, 6, size=(4, 3))
    got = ops.gather_last(ops.asarray(x), ops.asarray(index))
    want = np_ops.gather_last(x, index)
    close(ops.to_numpy(got), want)
    close(want[1, 2], x[1, 2, index[1, 2]])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_expand_dims(ops: Any, np_ops: NumpyOps, rng: np.random.Generator, axis: int) -> None:
    both(ops, np_ops, "expand_dims", rng.normal(size=(4, 3)).astype(np.float32), axis=axis)
