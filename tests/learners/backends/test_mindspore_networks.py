"""The MindSpore networks against the PyTorch ones: the same canonical names and shapes, and the
same outputs from the same weights (loaded through the portable state), eager and compiled."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
torch = pytest.importorskip("torch")

from mindspore import nn  # noqa: E402

from learners.backends.mindspore import agent_nets as ms_agent_nets  # noqa: E402
from learners.backends.mindspore import networks as ms_networks  # noqa: E402
from learners.backends.torch import agent_nets as torch_agent_nets  # noqa: E402
from learners.backends.torch import networks as torch_networks  # noqa: E402


class Forward(nn.Cell):
    """``net(x, h)`` as a cell of its own, so it can be compiled."""

    def __init__(self, net: nn.Cell) -> None:
        super().__init__()
        self.net = net

    def construct(self, x, h):  # type: ignore[no-untyped-def]
        return self.net(x, h)


def torch_state(prefix: str, module: torch.nn.Module) -> dict[str, np.ndarray]:
    return torch_networks.module_state(prefix, module)


@pytest.mark.parametrize("tanh_output", [False, True])
def test_mlp_names_and_forward_match_torch(tanh_output: bool) -> None:
    rng = np.random.default_rng(0)
    t_net = torch_networks.MLP(5, (16, 8), 3, tanh_output=tanh_output, output_scale=3e-3)
    m_net = ms_networks.MLP(5, (16, 8), 3, rng, tanh_output=tanh_output, output_scale=3e-3)
    t_state = torch_state("actor", t_net)
    m_state = ms_networks.module_state("actor", m_net)
    assert {k: v.shape for k, v in m_state.items()} == {k: v.shape for k, v in t_state.items()}
    ms_networks.load_module("actor", m_net, t_state)
    x = rng.normal(size=(7, 2, 5)).astype(np.float32)
    want = t_net(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(m_net(ms.Tensor(x)).asnumpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ms.jit(m_net)(ms.Tensor(x)).asnumpy(), want, rtol=1e-5, atol=1e-6)


def test_load_module_refuses_missing_or_misshapen_tensors() -> None:
    net = ms_networks.MLP(3, (4,), 2, np.random.default_rng(0))
    state = ms_networks.module_state("critic", net)
    before = {k: v.copy() for k, v in state.items()}
    with pytest.raises(KeyError, match="critic.layers.2.bias"):
        ms_networks.load_module(
            "critic", net, {k: v for k, v in state.items() if not k.endswith("2.bias")}
        )
    bad = {**state, "critic.layers.2.weight": np.zeros((3, 3), np.float32)}
    bad["critic.layers.0.weight"] = bad["critic.layers.0.weight"] + 1.0
    with pytest.raises(ValueError, match="critic.layers.2.weight"):
        ms_networks.load_module("critic", net, bad)
    after = ms_networks.module_state("critic", net)
    for k, v in before.items():  # nothing was assigned: the first tensor is unchanged too
        np.testing.assert_array_equal(after[k], v)


VARIANTS = list(itertools.product([True, False], [None, 6], ["tanh", "relu"], [(16,), (16, 12)]))


@pytest.mark.parametrize("shared,rnn,activation,hidden", VARIANTS)
def test_agent_mlp_matches_torch(
    shared: bool, rnn: int | None, activation: str, hidden: tuple[int, ...]
) -> None:
    n, obs, out = 3, 5, 4
    t_net = torch_agent_nets.AgentMLP(
        obs, hidden, out, n, shared=shared, activation=activation, rnn_hidden_size=rnn
    )
    t_net.reset_parameters(torch.Generator().manual_seed(0), head_gain=0.5)
    rng = np.random.default_rng(1)
    m_net = ms_agent_nets.AgentMLP(
        obs, hidden, out, n, shared=shared, activation=activation, rnn_hidden_size=rnn,
        rng=rng, head_gain=0.5,
    )  # fmt: skip
    t_state = torch_state("critic", t_net)
    m_state = ms_networks.module_state("critic", m_net)
    assert list(m_state) == list(t_state)  # same names, same order (the global norm's order)
    assert all(m_state[k].shape == v.shape for k, v in t_state.items())
    ms_networks.load_module("critic", m_net, t_state)
    if rnn is None:
        x = rng.normal(size=(6, n, obs)).astype(np.float32)
        h = np.zeros((1,), np.float32)
        want, _ = t_net(torch.tensor(x))
        want_h = None
    else:
        x = rng.normal(size=(4, 2, n, obs)).astype(np.float32)
        h = rng.normal(size=(2, n, rnn)).astype(np.float32)
        want, want_h = t_net(torch.tensor(x), torch.tensor(h))
    for call in (Forward(m_net), ms.jit(Forward(m_net))):
        got, got_h = call(ms.Tensor(x), ms.Tensor(h))
        np.testing.assert_allclose(got.asnumpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
        if want_h is not None:
            np.testing.assert_allclose(
                got_h.asnumpy(), want_h.detach().numpy(), rtol=1e-5, atol=1e-6
            )


def test_same_seed_same_initial_weights_as_tensorflow_scheme() -> None:
    """Initial weights are a pure function of the NumPy generator: two builds from one seed agree,
    and the orthogonal layers are orthogonal with the requested gain."""
    build = lambda: ms_agent_nets.AgentMLP(  # noqa: E731
        7, (8, 8), 2, 3, shared=False, activation="tanh", rnn_hidden_size=None,
        rng=np.random.default_rng(5), head_gain=0.01,
    )  # fmt: skip
    a, b = ms_networks.module_state("actor", build()), ms_networks.module_state("actor", build())
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    w = a["actor.layers.1.weight"][0]  # (out, in) = (8, 8), gain sqrt 2
    np.testing.assert_allclose(w @ w.T, 2.0 * np.eye(8), atol=1e-5)
