"""The PyTorch learners' gradient step: the multi-tensor clip against the shared definition, and
the fused Adam against Adam's formula written out in NumPy, including a gradient whose memory is
transposed (torch 2.13's fused CPU Adam updates the wrong entries from one unless it is made
contiguous first)."""

from __future__ import annotations

import numpy as np
import pytest

from learners.functional.gradients import clip_by_global_norm
from learners.functional.numpy_ops import NumpyOps

torch = pytest.importorskip("torch")
from learners.backends.torch.networks import adam, clip_gradients, gradient_step  # noqa: E402
from learners.backends.torch.ops import TorchOps  # noqa: E402

T = TorchOps()
N = NumpyOps()
SHAPES = [(4, 3), (3,), (2, 5), (1,)]


def _grads(rng: np.random.Generator, scale: float) -> list[np.ndarray]:
    return [(rng.normal(size=s) * scale).astype(np.float32) for s in SHAPES]


@pytest.mark.parametrize("max_grad_norm", [0.5, 100.0, None])
def test_clip_gradients_is_the_shared_clip(max_grad_norm: float | None) -> None:
    grads = _grads(np.random.default_rng(3), scale=2.0)
    clipped, norm = clip_gradients(T, [torch.tensor(g) for g in grads], max_grad_norm)
    want, want_norm = clip_by_global_norm(N, [g.astype(np.float64) for g in grads], max_grad_norm)
    assert T.item(norm) == pytest.approx(N.item(want_norm), rel=1e-6)
    for got, expected in zip(clipped, want, strict=True):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-8)
    if max_grad_norm == 0.5:  # clipping was on: the result has the cap's norm
        total = np.sqrt(sum(float((c.double() ** 2).sum()) for c in clipped))
        assert total == pytest.approx(0.5, rel=1e-5)


def _adam_by_hand(
    param: np.ndarray, grads: list[np.ndarray], lr: float, eps: float = 1e-8
) -> np.ndarray:
    """Adam (beta 0.9, 0.999, bias-corrected) in float64, one step per gradient."""
    p, m, v = param.astype(np.float64), np.zeros(param.shape), np.zeros(param.shape)
    for t, g in enumerate(grads, start=1):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        p = p - lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + eps)
    return p


def test_gradient_step_with_a_transposed_gradient_is_adam() -> None:
    """``w`` holds one (out, in) weight per agent, applied the way ``AgentLinear`` applies
    separate parameters (an einsum); autograd hands back its gradient laid out (agent, in, out)
    in memory: the step must still move each entry by its own gradient."""
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(2, 5, 4)).astype(np.float32)
    xs = [rng.normal(size=(6, 2, 4)).astype(np.float32) for _ in range(3)]
    w = torch.nn.Parameter(torch.tensor(w0))
    optimizer = adam([w], lr=0.01)
    seen = []
    for x in xs:
        loss = torch.einsum("bni,noi->bno", torch.tensor(x), w).square().sum()
        (grad,) = torch.autograd.grad(loss, [w], retain_graph=True)
        assert not grad.is_contiguous()  # the case this test is about
        seen.append(grad.numpy().astype(np.float64))
        gradient_step(T, loss, [optimizer], [w], max_grad_norm=None)
    np.testing.assert_allclose(w.detach().numpy(), _adam_by_hand(w0, seen, 0.01), atol=2e-6)
    assert float(optimizer.state[w]["step"]) == 3.0
