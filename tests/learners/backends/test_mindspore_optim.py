"""The MindSpore backend's Adam against ``torch.optim.Adam``: the same parameters after several
steps from the same gradients (epsilon placement and bias correction are where MindSpore's own
``nn.Adam`` differs), eager and compiled, and its moments portable under torch's names."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
torch = pytest.importorskip("torch")

from mindspore import nn  # noqa: E402

from learners.backends.mindspore.networks import parameter  # noqa: E402
from learners.backends.mindspore.optim import TorchAdam, clip_flat, flatten  # noqa: E402
from learners.functional.gradients import clip_by_global_norm  # noqa: E402
from learners.functional.numpy_ops import NumpyOps  # noqa: E402

N = NumpyOps()
SHAPES = {"layers.0.weight": (4, 3), "layers.0.bias": (4,), "log_std": (2,)}


class Step(nn.Cell):
    """A compiled-able cell that applies the optimiser to gradients given as inputs (one per
    parameter, flattened into one vector as the learners' updates do)."""

    def __init__(self, optimizer: TorchAdam) -> None:
        super().__init__()
        self.optimizer = optimizer

    def construct(self, grads: tuple[Any, ...], hyper: Any) -> Any:
        return self.optimizer(flatten(grads), hyper)


def run_both(lr: float, eps: float, steps: int, compiled: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    init = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    grads = [
        {
            k: (rng.normal(size=s) * 10.0 ** rng.integers(-4, 2)).astype(np.float32)
            for k, s in SHAPES.items()
        }
        for _ in range(steps)
    ]
    t_params = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in init.items()}
    t_opt = torch.optim.Adam(list(t_params.values()), lr=lr, eps=eps)
    m_params = [parameter(v, k) for k, v in init.items()]
    m_opt = TorchAdam(m_params, list(SHAPES), lr, eps=eps)
    step = Step(m_opt)
    call = ms.jit(step) if compiled else step
    for g in grads:
        for k, p in t_params.items():
            p.grad = torch.tensor(g[k])
        t_opt.step()
        call(ms.mutable(tuple(ms.Tensor(g[k]) for k in SHAPES)), m_opt.next_hyper())
    return t_params, t_opt, m_params, m_opt


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("eps", [1e-5, 1e-8])
def test_matches_torch_adam(compiled: bool, eps: float) -> None:
    t_params, _, m_params, _ = run_both(3e-3, eps, steps=12, compiled=compiled)
    for (name, t), m in zip(t_params.items(), m_params, strict=True):
        np.testing.assert_allclose(
            m.asnumpy(), t.detach().numpy(), rtol=1e-6, atol=1e-7, err_msg=name
        )


def test_mindspores_own_adam_would_not_match() -> None:
    """The reason for ``TorchAdam``: MindSpore's ``nn.Adam`` (epsilon hat) takes another step."""
    rng = np.random.default_rng(1)
    init, grad = (
        rng.normal(size=(5,)).astype(np.float32),
        rng.normal(size=(5,)).astype(np.float32) * 1e-4,
    )
    t_param = torch.nn.Parameter(torch.tensor(init))
    t_param.grad = torch.tensor(grad)
    torch.optim.Adam([t_param], lr=1e-2, eps=1e-5).step()
    m_param = parameter(init, "p")
    nn.Adam([m_param], learning_rate=1e-2, eps=1e-5)((ms.Tensor(grad),))
    assert not np.allclose(m_param.asnumpy(), t_param.detach().numpy(), rtol=1e-4, atol=0)


def test_state_uses_torch_names_and_loads_into_torch() -> None:
    t_params, t_opt, _, m_opt = run_both(1e-3, 1e-8, steps=3, compiled=False)
    state = m_opt.state("actor", "actor")
    assert set(state) == {
        f"optim/actor/actor.{k}/{key}" for k in SHAPES for key in ("step", "exp_avg", "exp_avg_sq")
    }
    for name, param in t_params.items():
        torch_state = t_opt.state[param]
        head = f"optim/actor/actor.{name}/"
        assert float(state[head + "step"]) == float(torch_state["step"]) == 3.0
        np.testing.assert_allclose(
            state[head + "exp_avg"], torch_state["exp_avg"].numpy(), rtol=1e-6, atol=1e-9
        )
        np.testing.assert_allclose(
            state[head + "exp_avg_sq"], torch_state["exp_avg_sq"].numpy(), rtol=1e-6, atol=1e-12
        )


def test_load_state_resumes_the_same_steps() -> None:
    """Three steps, a save, a load into a fresh optimiser, three more: as six without a break."""
    _, _, straight_params, _ = run_both(1e-3, 1e-5, steps=6, compiled=False, seed=4)
    rng = np.random.default_rng(4)
    init = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    grads = [
        {
            k: (rng.normal(size=s) * 10.0 ** rng.integers(-4, 2)).astype(np.float32)
            for k, s in SHAPES.items()
        }
        for _ in range(6)
    ]
    params = [parameter(v, k) for k, v in init.items()]
    first = TorchAdam(params, list(SHAPES), 1e-3, eps=1e-5)
    for g in grads[:3]:
        Step(first)(tuple(ms.Tensor(g[k]) for k in SHAPES), first.next_hyper())
    saved = first.state("critic", "critic")
    second = TorchAdam(params, list(SHAPES), 1e-3, eps=1e-5)
    second.load_state("critic", "critic", saved)
    assert second.step == 3
    for g in grads[3:]:
        Step(second)(tuple(ms.Tensor(g[k]) for k in SHAPES), second.next_hyper())
    for a, b in zip(params, straight_params, strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


def test_fresh_state_is_empty_and_loading_nothing_resets() -> None:
    _, _, _, m_opt = run_both(1e-3, 1e-8, steps=2, compiled=False)
    m_opt.load_state("actor", "actor", {})
    assert m_opt.step == 0 and m_opt.state("actor", "actor") == {}
    assert not m_opt.exp_avg.asnumpy().any() and not m_opt.exp_avg_sq.asnumpy().any()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_first_step_equals_torchs_to_float32_rounding(compiled: bool) -> None:
    """One step from zero weights, so the weights after it are the step itself: the moments equal
    torch's bit for bit and the step agrees to 1e-6 of itself (torch's float32 ``sqrt`` is one ulp
    off in about a sixth of entries; MindSpore's is correctly rounded). ``test_matches_torch_adam``
    compares weights of size ~1 and cannot see an error this small in a 1e-3 step; this can: a
    compiled graph once folded ``1.0 - beta2`` in float32 (0.0009999871) and every compiled step
    came out 6e-6 (relative) off, which showed only as a parity failure where a gradient was near
    epsilon."""
    rng = np.random.default_rng(7)
    shapes = {"w": (64,), "b": (32,)}
    grads = {
        k: (rng.normal(size=s) * 10.0 ** rng.uniform(-10, 0, s)).astype(np.float32)
        for k, s in shapes.items()
    }
    t_params = {k: torch.nn.Parameter(torch.zeros(s)) for k, s in shapes.items()}
    t_opt = torch.optim.Adam(list(t_params.values()), lr=1e-3)
    for k, p in t_params.items():
        p.grad = torch.tensor(grads[k])
    t_opt.step()
    m_params = [parameter(np.zeros(s, np.float32), k) for k, s in shapes.items()]
    m_opt = TorchAdam(m_params, list(shapes), 1e-3)
    step = Step(m_opt)
    call = ms.jit(step) if compiled else step
    call(ms.mutable(tuple(ms.Tensor(grads[k]) for k in shapes)), m_opt.next_hyper())
    state = m_opt.state("actor", "actor")
    for (name, t), m in zip(t_params.items(), m_params, strict=True):
        torch_state = t_opt.state[t]
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(
                state[f"optim/actor/actor.{name}/{key}"], torch_state[key].numpy(), err_msg=key
            )
        np.testing.assert_allclose(m.asnumpy(), t.detach().numpy(), rtol=1e-6, atol=0, err_msg=name)


class Clip(nn.Cell):
    """``clip_flat`` over ``flatten``'s vector, as the learners' updates call them."""

    def __init__(self, max_grad_norm: float | None) -> None:
        super().__init__()
        self.max_grad_norm = max_grad_norm

    def construct(self, grads: tuple[Any, ...]) -> Any:
        return clip_flat(flatten(grads), self.max_grad_norm)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("max_grad_norm", [None, 0.5, 1e3], ids=["off", "clips", "above"])
def test_clip_flat_is_the_global_norm_clip(compiled: bool, max_grad_norm: float | None) -> None:
    """The flat clip the MindSpore updates take is ``clip_by_global_norm`` (in float64 NumPy) of
    the per-parameter gradients, laid end to end: the same norm, the same scaled entries, and
    nothing scaled when clipping is off or the norm is under the bound."""
    rng = np.random.default_rng(3)
    grads = [rng.normal(size=s).astype(np.float32) for s in ((4, 3), (4,), (2, 5))]
    cell = Clip(max_grad_norm)
    call = ms.jit(cell) if compiled else cell
    clipped, norm = call(ms.mutable(tuple(ms.Tensor(g) for g in grads)))
    want, want_norm = clip_by_global_norm(N, [g.astype(np.float64) for g in grads], max_grad_norm)
    np.testing.assert_allclose(float(norm.asnumpy()), want_norm, rtol=1e-6)
    flat_want = np.concatenate([g.reshape(-1) for g in want])
    np.testing.assert_allclose(clipped.asnumpy(), flat_want, rtol=1e-6, atol=1e-7)
    if max_grad_norm != 0.5:
        np.testing.assert_array_equal(
            clipped.asnumpy(), np.concatenate([g.reshape(-1) for g in grads])
        )
