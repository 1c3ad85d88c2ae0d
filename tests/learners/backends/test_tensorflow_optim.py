"""The TensorFlow backend's Adam against ``torch.optim.Adam``: the same parameters after several
steps from the same gradients, eagerly and inside a ``tf.function``; Keras' own Adam is not the
same update (its epsilon sits elsewhere), which is why the backend writes torch's out; and the
moments travel between the two through the portable state, so a run resumes in either."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from learners.backends.tensorflow.networks import Param  # noqa: E402
from learners.backends.tensorflow.optim import TorchAdam  # noqa: E402

# Kernels are stored transposed in TensorFlow: the state must swap them back.
SHAPES = {"layers.0.weight": (4, 3), "layers.0.bias": (4,), "log_std": (2,)}


def tf_params(values: dict[str, np.ndarray]) -> list[Param]:
    return [
        Param(name, tf.Variable(np.swapaxes(v, -1, -2) if v.ndim == 2 else v), v.ndim == 2)
        for name, v in values.items()
    ]


def canonical(params: list[Param]) -> dict[str, np.ndarray]:
    return {p.name: p.to_canonical(p.variable.numpy()) for p in params}


def gradients(rng: np.random.Generator, steps: int) -> list[dict[str, np.ndarray]]:
    """Gradients over six orders of magnitude: some far below epsilon, some far above."""
    return [
        {
            k: (rng.normal(size=s) * 10.0 ** rng.integers(-7, 2)).astype(np.float32)
            for k, s in SHAPES.items()
        }  # fmt: skip
        for _ in range(steps)
    ]


def torch_run(init: dict[str, np.ndarray], grads: list[Any], lr: float, eps: float) -> Any:
    params = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in init.items()}
    optimizer = torch.optim.Adam(list(params.values()), lr=lr, eps=eps)
    for g in grads:
        for k, p in params.items():
            p.grad = torch.tensor(g[k])
        optimizer.step()
    return params, optimizer


def apply_all(optimizer: TorchAdam, grads: list[dict[str, np.ndarray]], compiled: bool) -> None:
    def step(*gs: Any) -> None:
        optimizer.apply(list(gs))

    call = tf.function(step, autograph=False) if compiled else step
    for g in grads:
        call(*(tf.constant(p.from_canonical(g[p.name])) for p in optimizer.params))


@pytest.mark.parametrize("eps", [1e-8, 1e-5])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_matches_torch_adam(eps: float, compiled: bool) -> None:
    rng = np.random.default_rng(0)
    init = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    grads = gradients(rng, 12)
    params, _ = torch_run(init, grads, 3e-3, eps)
    ours = tf_params(init)
    apply_all(TorchAdam(ours, 3e-3, eps=eps), grads, compiled)
    got = canonical(ours)
    for name, p in params.items():
        np.testing.assert_allclose(
            got[name], p.detach().numpy(), rtol=1e-6, atol=1e-7, err_msg=name
        )


def test_keras_adam_places_epsilon_differently() -> None:
    """From the same gradient, Keras' Adam takes a different first step wherever |g| is near
    epsilon: it adds epsilon after folding sqrt(1 - beta2^t) into the step size."""
    value = np.zeros(5, np.float32)
    grad = np.array([1e-9, 1e-7, 1e-6, 1e-5, 1.0], np.float32)
    eps, lr = 1e-5, 1e-3
    keras_var = tf.Variable(value)
    tf.keras.optimizers.Adam(learning_rate=lr, epsilon=eps).apply_gradients([(grad, keras_var)])
    ours = tf_params({"x": value})
    TorchAdam(ours, lr, eps=eps).apply([tf.constant(grad)])
    params, _ = torch_run({"x": value}, [{"x": grad}], lr, eps)
    np.testing.assert_allclose(ours[0].variable.numpy(), params["x"].detach().numpy(), rtol=1e-6)
    differs = ~np.isclose(keras_var.numpy(), params["x"].detach().numpy(), rtol=1e-3)
    assert differs[:4].all() and not differs[4]  # the same only where |g| >> epsilon


def test_moments_move_between_backends_and_resume_the_same() -> None:
    """torch's optimiser state loaded into ours (and back) makes the same next steps."""
    from learners.backends.torch.networks import load_optimizer, optimizer_state

    rng = np.random.default_rng(1)
    init = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    first, then = gradients(rng, 3), gradients(rng, 4)
    params, optimizer = torch_run(init, first, 1e-2, 1e-5)
    module = torch.nn.Module()
    for name, p in params.items():  # register under the canonical names
        parent = module
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.register_parameter(leaf, p)
    state = optimizer_state("net", optimizer, "net", module)
    ours = tf_params({k: p.detach().numpy() for k, p in params.items()})
    adam = TorchAdam(ours, 1e-2, eps=1e-5)
    adam.load_state("net", "net", state)
    exported = adam.state("net", "net")
    assert set(exported) == set(state)
    for key, value in state.items():
        np.testing.assert_allclose(exported[key], value, rtol=0, atol=0, err_msg=key)
    apply_all(adam, then, compiled=True)
    for g in then:
        for k, p in params.items():
            p.grad = torch.tensor(g[k])
        optimizer.step()
    got = canonical(ours)
    for name, p in params.items():
        np.testing.assert_allclose(
            got[name], p.detach().numpy(), rtol=1e-6, atol=1e-7, err_msg=name
        )
    # And back: our moments load into a fresh torch Adam.
    fresh = torch.optim.Adam(list(module.parameters()), lr=1e-2, eps=1e-5)
    load_optimizer("net", fresh, "net", module, adam.state("net", "net"))
    assert int(fresh.state[next(iter(module.parameters()))]["step"]) == 7


def test_a_fresh_adam_has_no_state_and_loading_nothing_resets_it() -> None:
    ours = tf_params({"x": np.ones(3, np.float32)})
    adam = TorchAdam(ours, 1e-3)
    assert adam.state("n", "n") == {}
    adam.apply([tf.ones(3)])
    assert set(adam.state("n", "n")) == {
        "optim/n/n.x/step",
        "optim/n/n.x/exp_avg",
        "optim/n/n.x/exp_avg_sq",
    }
    adam.load_state("n", "n", {})
    assert adam.state("n", "n") == {} and float(adam.exp_avg[0].numpy().sum()) == 0.0
