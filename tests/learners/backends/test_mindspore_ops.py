"""``MindSporeOps`` beyond the shared oracle tests (``tests/learners/functional`` run those for
every backend): float32 results as exact as PyTorch's where MindSpore's own float32 kernels are
not, exact gradients, the shared math inside a compiled graph, and the graph-safe loss forms, with
the MindSpore behaviour that makes them necessary demonstrated, so that a MindSpore upgrade that
fixes it shows up here."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
torch = pytest.importorskip("torch")

from mindspore import Tensor, nn, ops  # noqa: E402

from learners.backends.mindspore import ops as ms_ops  # noqa: E402
from learners.backends.mindspore.losses import policy_terms, wqmix_terms  # noqa: E402
from learners.backends.mindspore.ops import MindSporeOps  # noqa: E402
from learners.functional import distributions as dist  # noqa: E402
from learners.functional.losses import policy_loss  # noqa: E402
from learners.functional.numpy_ops import NumpyOps  # noqa: E402
from learners.functional.wqmix import wqmix_loss  # noqa: E402

M, N = MindSporeOps(), NumpyOps()


def ulps(actual: Any, exact: Any) -> float:
    """The largest error of float32 ``actual`` against float64 ``exact``, in float32 ulps."""
    spacing = np.abs(np.spacing(np.asarray(exact, np.float32))).astype(np.float64)
    return float(np.max(np.abs(np.asarray(actual, np.float64) - exact) / spacing))


def wide(rng: np.random.Generator) -> np.ndarray:
    return (rng.normal(size=20_000) * 3.0).astype(np.float32)


@pytest.mark.parametrize(
    ("name", "exact", "positive"),
    [
        ("exp64", np.exp, False),
        ("log64", np.log, True),
        ("tanh64", np.tanh, False),
        ("sigmoid64", lambda x: 1.0 / (1.0 + np.exp(-x)), False),
    ],
)
def test_transcendentals_are_correctly_rounded(name: str, exact: Any, positive: bool) -> None:
    x = wide(np.random.default_rng(0))
    if positive:
        x = np.abs(x) + np.float32(1e-3)
    got = getattr(ms_ops, name)(Tensor(x)).asnumpy()
    assert got.dtype == np.float32
    assert ulps(got, exact(x.astype(np.float64))) <= 0.5 + 1e-9


def test_mindspores_own_float32_kernels_are_not() -> None:
    """Why the ``*64`` functions exist: tanh(5) above 1, and errors of thousands of ulps."""
    assert float(ops.tanh(Tensor(np.float32(5.0))).asnumpy()) > 1.0
    x = np.abs(wide(np.random.default_rng(1))) + np.float32(1e-3)
    assert ulps(ops.log(Tensor(x)).asnumpy(), np.log(x.astype(np.float64))) > 100


def _grad_error(ms_fn: Any, torch_fn: Any, x: np.ndarray, w: np.ndarray) -> float:
    """Max error of MindSpore's float32 gradient of sum(w * f(x)) against torch's float64 one,
    relative to the gradient's scale."""
    leaf = torch.tensor(x.astype(np.float64), requires_grad=True)
    (torch_fn(leaf) * torch.tensor(w, dtype=torch.float64)).sum().backward()
    exact = leaf.grad.numpy()
    got = ms.grad(lambda a: (ms_fn(a) * Tensor(w)).sum())(Tensor(x)).asnumpy()
    return float(np.max(np.abs(got - exact)) / np.max(np.abs(exact)))


def test_log_softmax_gradient_is_exact() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(64, 5)).astype(np.float32)
    w = rng.normal(size=(64, 5)).astype(np.float32)
    exact = lambda t: torch.log_softmax(t, -1)  # noqa: E731
    assert _grad_error(lambda a: ms_ops.log_softmax64(a, -1), exact, x, w) < 2e-7
    # MindSpore's LogSoftmax gradient kernel, even in float64, is ~60 times less exact.
    builtin = lambda a: ops.log_softmax(a.astype(ms.float64), -1).astype(ms.float32)  # noqa: E731
    assert _grad_error(builtin, exact, x, w) > 5e-7


class Shared(nn.Cell):
    """The shared distribution and loss code, called through ``MindSporeOps`` in a cell."""

    def construct(self, logits, actions, avail, log_prob_old, advantages, mask):  # type: ignore[no-untyped-def]
        log_prob = dist.categorical_log_prob(M, logits, actions, avail)
        entropy = dist.categorical_entropy(M, logits, avail)
        loss, kl, clipped = policy_terms(M, log_prob, log_prob_old, advantages, mask, 0.2)
        return loss, kl, clipped, M.sum(entropy * mask), M.max(log_prob, axis=(0, 1))


def _policy_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    avail = (rng.uniform(size=(12, 3, 5)) > 0.3).astype(np.float32)
    avail[..., 0] = 1.0
    actions = np.argmax(np.log(avail + 1e-12) + rng.gumbel(size=avail.shape), -1)
    mask = (rng.uniform(size=(12, 3)) > 0.25).astype(np.float32)
    mask[0] = 0.0
    return [
        rng.normal(size=(12, 3, 5)).astype(np.float32),
        actions.astype(np.int64),
        avail,
        rng.normal(-1.6, 0.4, size=(12, 3)).astype(np.float32),
        rng.normal(size=(12, 3)).astype(np.float32),
        mask,
    ]


def test_shared_math_compiled_equals_eager_equals_the_oracle() -> None:
    inputs = _policy_inputs(np.random.default_rng(3))
    cell = Shared()
    eager = [t.asnumpy() for t in cell(*(Tensor(a) for a in inputs))]
    compiled = [t.asnumpy() for t in ms.jit(cell)(*(Tensor(a) for a in inputs))]
    logits, actions, avail, log_prob_old, advantages, mask = (N.asarray(a) for a in inputs)
    log_prob = dist.categorical_log_prob(N, logits, actions, avail)
    oracle = policy_loss(N, log_prob, log_prob_old, advantages, mask, 0.2)
    want = [
        oracle.loss, oracle.approx_kl, oracle.clip_fraction,
        N.sum(dist.categorical_entropy(N, logits, avail) * mask), np.max(log_prob),
    ]  # fmt: skip
    for got_eager, got_compiled, expected in zip(eager, compiled, want, strict=True):
        np.testing.assert_allclose(got_compiled, got_eager, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got_eager, expected, rtol=2e-6, atol=1e-7)


class Grad(nn.Cell):
    """d loss / d log_prob of a policy loss inside a compiled graph, with the loss taken from the
    shared NamedTuple (``via_named_tuple``) or from the graph-safe tuple."""

    def __init__(self, via_named_tuple: bool) -> None:
        super().__init__()
        self.via_named_tuple = via_named_tuple

    def loss(self, log_prob, log_prob_old, advantages, mask):  # type: ignore[no-untyped-def]
        if self.via_named_tuple:
            return policy_loss(M, log_prob, log_prob_old, advantages, mask, 0.2).loss
        return policy_terms(M, log_prob, log_prob_old, advantages, mask, 0.2)[0]

    def construct(self, log_prob, log_prob_old, advantages, mask):  # type: ignore[no-untyped-def]
        return ms.grad(self.loss)(log_prob, log_prob_old, advantages, mask)


def test_graph_safe_policy_loss_has_the_shared_gradient_and_the_named_tuple_has_none() -> None:
    rng = np.random.default_rng(4)
    log_prob_old = rng.normal(-1.0, 0.2, size=(10, 3)).astype(np.float32)
    arrays = [
        log_prob_old + rng.normal(0, 0.3, size=(10, 3)).astype(np.float32),
        log_prob_old,
        rng.normal(size=(10, 3)).astype(np.float32),
        (rng.uniform(size=(10, 3)) > 0.3).astype(np.float32),
    ]
    leaf = torch.tensor(arrays[0], dtype=torch.float64, requires_grad=True)
    from learners.backends.torch.ops import TorchOps

    rest = [torch.tensor(a, dtype=torch.float64) for a in arrays[1:]]
    policy_loss(TorchOps(), leaf, *rest, 0.2).loss.backward()
    expected = leaf.grad.numpy()
    safe = ms.jit(Grad(via_named_tuple=False))(*(Tensor(a) for a in arrays)).asnumpy()
    np.testing.assert_allclose(safe, expected, rtol=1e-5, atol=1e-8)
    assert np.abs(expected).max() > 1e-3
    # The MindSpore behaviour ``losses.py`` works around: through the NamedTuple, zero gradients.
    through_tuple = ms.jit(Grad(via_named_tuple=True))(*(Tensor(a) for a in arrays)).asnumpy()
    assert not np.abs(through_tuple).any()


def test_graph_safe_forms_equal_the_shared_functions() -> None:
    rng = np.random.default_rng(5)
    log_prob_old = rng.normal(-1.0, 0.2, size=(9, 2))
    policy = [log_prob_old + rng.normal(0, 0.4, size=(9, 2)), log_prob_old,
              rng.normal(size=(9, 2)), (rng.uniform(size=(9, 2)) > 0.3) * 1.0]  # fmt: skip
    assert tuple(policy_terms(N, *policy, 0.15)) == tuple(policy_loss(N, *policy, 0.15))
    weights = np.where(rng.uniform(size=7) > 0.5, 1.0, 0.3)
    mask = (rng.uniform(size=7) > 0.2) * 1.0
    wq = [rng.normal(size=7), rng.normal(size=7), rng.normal(size=7), weights, mask]
    assert tuple(wqmix_terms(N, *wq)) == tuple(wqmix_loss(N, *wq))
