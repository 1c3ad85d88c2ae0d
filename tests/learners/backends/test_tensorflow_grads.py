"""Gradients of the shared math under TensorFlow: against finite differences of the NumPy
oracle, zero where masked, blocked by ``stop_gradient``; and global-norm clipping (reference defect
``per-tensor-clipping``, docs/reference-defects.md) agreeing with ``tf.clip_by_global_norm``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from learners.functional import distributions as D
from learners.functional import losses as L
from learners.functional.gradients import clip_by_global_norm
from learners.functional.numpy_ops import NumpyOps

tf = pytest.importorskip("tensorflow")
from learners.backends.tensorflow.ops import TensorFlowOps  # noqa: E402

T = TensorFlowOps()
N = NumpyOps()


def finite_difference(fn: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> Any:
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (fn(up) - fn(down)) / (2 * eps)
    return grad


def tf_grad(fn: Callable[[Any], Any], x: np.ndarray) -> np.ndarray:
    leaf = tf.Variable(x.astype(np.float32))  # the backend computes in float32 throughout
    with tf.GradientTape() as tape:
        loss = fn(leaf)
    return np.asarray(tape.gradient(loss, leaf).numpy())


def data(rng: np.random.Generator) -> dict[str, np.ndarray]:
    shape = (6, 3)
    mask = (rng.uniform(size=shape) > 0.3).astype(np.float64)
    mask[0] = 0.0
    log_prob_old = rng.normal(-1.0, 0.2, size=shape)
    return {
        "log_prob": log_prob_old + rng.normal(0, 0.3, size=shape),
        "log_prob_old": log_prob_old,
        "advantages": rng.normal(size=shape),
        "values": rng.normal(size=shape),
        "values_old": rng.normal(size=shape),
        "returns": rng.normal(size=shape) * 2,
        "mask": mask,
    }


def constants(d: dict[str, np.ndarray]) -> dict[str, Any]:
    return {k: tf.constant(v, tf.float32) for k, v in d.items()}


def test_policy_loss_gradient_matches_oracle() -> None:
    d = data(np.random.default_rng(0))
    t = constants(d)

    def oracle(lp: np.ndarray) -> float:
        return N.item(L.policy_loss(N, lp, d["log_prob_old"], d["advantages"], d["mask"], 0.2).loss)

    got = tf_grad(
        lambda lp: L.policy_loss(T, lp, t["log_prob_old"], t["advantages"], t["mask"], 0.2).loss,
        d["log_prob"],
    )
    np.testing.assert_allclose(got, finite_difference(oracle, d["log_prob"]), atol=1e-5)
    assert (got[d["mask"] == 0] == 0).all() and np.abs(got).sum() > 0


@pytest.mark.parametrize("value_clip_eps,huber_delta", [(None, None), (0.2, 1.0), (0.2, None)])
def test_value_loss_gradient_matches_oracle(value_clip_eps: Any, huber_delta: Any) -> None:
    d = data(np.random.default_rng(1))
    t = constants(d)
    rest = ("values_old", "returns", "mask")

    def oracle(v: np.ndarray) -> float:
        return N.item(L.value_loss(N, v, *(d[k] for k in rest), value_clip_eps, huber_delta))

    got = tf_grad(
        lambda v: L.value_loss(T, v, *(t[k] for k in rest), value_clip_eps, huber_delta),
        d["values"],
    )
    np.testing.assert_allclose(got, finite_difference(oracle, d["values"]), atol=1e-5)
    assert (got[d["mask"] == 0] == 0).all()  # mask the loss, never the prediction


def test_stop_gradient_blocks_the_target() -> None:
    rng = np.random.default_rng(2)
    returns = tf.Variable(rng.normal(size=(4, 2)).astype(np.float32))
    values = tf.Variable(rng.normal(size=(4, 2)).astype(np.float32))
    ones = tf.ones((4, 2))
    with tf.GradientTape() as tape:
        loss = L.value_loss(T, values, tf.stop_gradient(values), returns, ones, None, None)
    grad_returns, grad_values = tape.gradient(loss, [returns, values])
    assert grad_returns is None and grad_values is not None


def test_categorical_gradient_is_finite_with_unavailable_actions() -> None:
    logits = tf.Variable(np.random.default_rng(3).normal(size=(5, 4)).astype(np.float32))
    avail = tf.constant([[1.0, 0.0, 1.0, 0.0]] * 5)
    actions = tf.constant([0, 2, 2, 0, 2], tf.int64)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(D.categorical_log_prob(T, logits, actions, avail)) + tf.reduce_sum(
            D.categorical_entropy(T, logits, avail)
        )
    grad = tape.gradient(loss, logits).numpy()
    assert np.isfinite(grad).all()
    assert (grad[:, [1, 3]] == 0).all()  # unavailable actions get no gradient


def test_defect3_global_norm_clipping_agrees_with_tensorflow() -> None:
    rng = np.random.default_rng(4)
    grads = [tf.constant(rng.normal(size=s).astype(np.float32) * 5) for s in [(4, 3), (3,), (2, 2)]]
    clipped, norm = clip_by_global_norm(T, grads, 0.5)
    reference, reference_norm = tf.clip_by_global_norm(grads, 0.5)
    assert T.item(norm) == pytest.approx(float(reference_norm), rel=1e-6)
    for ours, theirs in zip(clipped, reference, strict=True):
        # tf.clip_by_global_norm divides by the norm itself; ours by norm + 1e-6 (as torch does).
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5)
    # Per-tensor clipping (the reference's TensorFlow copy) gives each tensor the limit instead.
    per_tensor = [tf.clip_by_norm(g, 0.5) for g in grads]
    assert not np.allclose(per_tensor[1].numpy(), clipped[1].numpy())
    unclipped, _ = clip_by_global_norm(T, grads, None)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(unclipped, grads, strict=True))
