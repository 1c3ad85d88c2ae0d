"""Gradients of the shared math under PyTorch: against finite differences of the NumPy oracle,
zero where masked, blocked by ``stop_gradient``, and global-norm clipping (reference defect
``per-tensor-clipping``, docs/reference-defects.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from learners.functional import distributions as D
from learners.functional import losses as L
from learners.functional.gradients import clip_by_global_norm
from learners.functional.numpy_ops import NumpyOps

torch = pytest.importorskip("torch")
from learners.backends.torch.ops import TorchOps  # noqa: E402

T = TorchOps()
N = NumpyOps()


def finite_difference(fn: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (fn(up) - fn(down)) / (2 * eps)
    return grad


def torch_grad(fn: Callable[[Any], Any], x: np.ndarray) -> np.ndarray:
    leaf = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    fn(leaf).backward()
    return leaf.grad.numpy()


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


def test_policy_loss_gradient_matches_oracle(rng: np.random.Generator) -> None:
    d = data(rng)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in d.items()}

    def oracle(lp: np.ndarray) -> float:
        return N.item(L.policy_loss(N, lp, d["log_prob_old"], d["advantages"], d["mask"], 0.2).loss)

    def backend(lp: Any) -> Any:
        return L.policy_loss(T, lp, t["log_prob_old"], t["advantages"], t["mask"], 0.2).loss

    got = torch_grad(backend, d["log_prob"])
    np.testing.assert_allclose(got, finite_difference(oracle, d["log_prob"]), atol=1e-6)
    assert (got[d["mask"] == 0] == 0).all()
    assert np.abs(got).sum() > 0


@pytest.mark.parametrize("value_clip_eps,huber_delta", [(None, None), (0.2, 1.0), (0.2, None)])
def test_value_loss_gradient_matches_oracle(
    rng: np.random.Generator, value_clip_eps: Any, huber_delta: Any
) -> None:
    d = data(rng)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in d.items()}
    rest = ("values_old", "returns", "mask")

    def oracle(v: np.ndarray) -> float:
        args = (d[k] for k in rest)
        return N.item(L.value_loss(N, v, *args, value_clip_eps, huber_delta))

    def backend(v: Any) -> Any:
        return L.value_loss(T, v, *(t[k] for k in rest), value_clip_eps, huber_delta)

    got = torch_grad(backend, d["values"])
    np.testing.assert_allclose(got, finite_difference(oracle, d["values"]), atol=1e-6)
    assert (got[d["mask"] == 0] == 0).all()  # mask the loss, never the prediction


def test_stop_gradient_blocks_the_target(rng: np.random.Generator) -> None:
    returns = torch.tensor(rng.normal(size=(4, 2)), requires_grad=True)
    values = torch.tensor(rng.normal(size=(4, 2)), requires_grad=True)
    loss = L.value_loss(T, values, values.detach(), returns, torch.ones(4, 2), None, None)
    loss.backward()
    assert returns.grad is None and values.grad is not None


def test_categorical_gradient_is_finite_with_unavailable_actions(rng: np.random.Generator):
    logits = torch.tensor(rng.normal(size=(5, 4)), requires_grad=True)
    avail = torch.tensor([[1.0, 0.0, 1.0, 0.0]] * 5)
    actions = torch.tensor([0, 2, 2, 0, 2])
    loss = (
        D.categorical_log_prob(T, logits, actions, avail).sum()
        + D.categorical_entropy(T, logits, avail).sum()
    )
    loss.backward()
    assert torch.isfinite(logits.grad).all()
    assert (logits.grad[:, [1, 3]] == 0).all()  # unavailable actions get no gradient


def test_defect3_clipping_is_by_global_norm(rng: np.random.Generator) -> None:
    big = torch.tensor([3.0, 4.0])  # norm 5
    small = torch.tensor([0.0, 0.1])  # norm 0.1
    clipped, norm = clip_by_global_norm(T, [big, small], 1.0)
    assert T.item(norm) == pytest.approx(np.sqrt(25.01), rel=1e-6)
    # One factor for every tensor: the direction of the whole update is kept.
    factor = 1.0 / (np.sqrt(25.01) + 1e-6)
    np.testing.assert_allclose(clipped[0].numpy(), big.numpy() * factor, rtol=1e-6)
    np.testing.assert_allclose(clipped[1].numpy(), small.numpy() * factor, rtol=1e-6)
    total = np.sqrt(sum(float((c**2).sum()) for c in clipped))
    assert total == pytest.approx(1.0, rel=1e-5)
    # Per-tensor clipping (the reference's TensorFlow copy) leaves the small tensor unchanged.
    per_tensor_small = small * min(1.0, 1.0 / float(small.norm()))
    assert not np.allclose(per_tensor_small.numpy(), clipped[1].numpy())


def test_defect3_no_clipping_when_disabled() -> None:
    grads = [torch.tensor([30.0, 40.0]), torch.tensor([1.0])]
    clipped, norm = clip_by_global_norm(T, grads, None)
    assert all(torch.equal(a, b) for a, b in zip(clipped, grads, strict=True))
    assert T.item(norm) == pytest.approx(np.sqrt(2501.0))


def test_global_norm_clipping_agrees_with_torch(rng: np.random.Generator) -> None:
    params = [
        torch.nn.Parameter(torch.tensor(rng.normal(size=s), dtype=torch.float32))
        for s in [(4, 3), (3,), (2, 2)]
    ]
    grads = [torch.tensor(rng.normal(size=p.shape) * 5, dtype=torch.float32) for p in params]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    torch_norm = torch.nn.utils.clip_grad_norm_(params, 0.5)
    clipped, norm = clip_by_global_norm(T, grads, 0.5)
    assert T.item(norm) == pytest.approx(float(torch_norm), rel=1e-6)
    for p, c in zip(params, clipped, strict=True):
        np.testing.assert_allclose(c.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-7)
    # and the oracle gives the same numbers
    np_clipped, np_norm = clip_by_global_norm(N, [g.numpy().astype(np.float64) for g in grads], 0.5)
    assert N.item(np_norm) == pytest.approx(float(torch_norm), rel=1e-6)
    for a, c in zip(np_clipped, clipped, strict=True):
        np.testing.assert_allclose(c.numpy(), a, rtol=1e-5, atol=1e-7)
