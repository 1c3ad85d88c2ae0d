"""TensorFlow networks against their PyTorch twins: the same canonical names, PyTorch's layout in
the state (kernels transposed on the way out and back in) and the same outputs from the same
weights, for every network the learners use; loading is all or nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from learners.backends.tensorflow import agent_nets as tf_agent_nets  # noqa: E402
from learners.backends.tensorflow import networks as tf_nets  # noqa: E402
from learners.backends.torch import agent_nets as torch_agent_nets  # noqa: E402
from learners.backends.torch import networks as torch_nets  # noqa: E402

RNG = np.random.default_rng(0)


def copy_weights(torch_module: Any, tf_module: Any) -> dict[str, np.ndarray]:
    """torch's state into the TensorFlow twin through the canonical names; the names must match."""
    state = torch_nets.module_state("net", torch_module)
    assert set(state) == set(tf_nets.module_state("net", tf_module)), "canonical names differ"
    tf_nets.load_module("net", tf_module, state)
    return state


def test_mlp_layout_and_outputs() -> None:
    ours = tf_nets.MLP(5, (8, 6), 3, RNG, tanh_output=True)
    theirs = torch_nets.MLP(5, (8, 6), 3, tanh_output=True)
    state = copy_weights(theirs, ours)
    assert tuple(ours.layers[0].kernel.shape) == (5, 8)  # Keras' (in, out)
    assert state["net.layers.0.weight"].shape == (8, 5)  # PyTorch's (out, in)
    exported = tf_nets.module_state("net", ours)
    for name, value in state.items():
        np.testing.assert_array_equal(exported[name], value)
    x = RNG.normal(size=(4, 2, 5)).astype(np.float32)
    want = theirs(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(ours(tf.constant(x)).numpy(), want, rtol=1e-5, atol=1e-6)


def test_per_agent_mlp() -> None:
    ours = tf_nets.PerAgentMLP(3, 4, (6,), 2, RNG)
    theirs = torch_nets.PerAgentMLP(3, 4, (6,), 2)
    copy_weights(theirs, ours)
    x = RNG.normal(size=(5, 3, 4)).astype(np.float32)
    want = theirs(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(ours(tf.constant(x)).numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "separate"])
@pytest.mark.parametrize("rnn", [None, 5], ids=["mlp", "gru"])
@pytest.mark.parametrize("hidden", [(8,), (8, 6)], ids=["one-layer", "two-layers"])
def test_agent_mlp(shared: bool, rnn: int | None, hidden: tuple[int, ...]) -> None:
    n = 3
    kw: dict[str, Any] = {"shared": shared, "activation": "tanh", "rnn_hidden_size": rnn}
    ours = tf_agent_nets.AgentMLP(4, hidden, 2, n, rng=RNG, head_gain=0.5, **kw)
    theirs = torch_agent_nets.AgentMLP(4, hidden, 2, n, **kw)
    theirs.reset_parameters(torch.Generator().manual_seed(0), head_gain=0.5)
    copy_weights(theirs, ours)
    if rnn is None:
        x = RNG.normal(size=(7, n, 4)).astype(np.float32)
        want, _ = theirs(torch.tensor(x))
        got, _ = ours(tf.constant(x))
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
        return
    x = RNG.normal(size=(6, 2, n, 4)).astype(np.float32)  # (L, B, N, in)
    h = RNG.normal(size=(2, n, rnn)).astype(np.float32)
    starts = np.zeros((6, 2), np.float32)
    starts[3, 1] = 1.0  # an episode starts in the middle of copy 1's sequence
    want_after, want_before = theirs.recur(
        theirs.encode(torch.tensor(x)), torch.tensor(h), torch.tensor(starts)
    )
    for compiled in (False, True):

        def recur(x: Any, h: Any, starts: Any) -> Any:
            return ours.recur(ours.encode(x), h, starts)

        fn = tf.function(recur, autograph=False) if compiled else recur
        after, before = fn(tf.constant(x), tf.constant(h), tf.constant(starts))
        np.testing.assert_allclose(after.numpy(), want_after.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            before.numpy(), want_before.detach().numpy(), rtol=1e-5, atol=1e-6
        )
    assert np.isfinite(after.numpy()).all()
    assert np.all(before.numpy()[3, 1] == 0.0)  # the state is zeroed where the episode starts
    want, want_h = theirs(torch.tensor(x), torch.tensor(h))
    got, got_h = ours(tf.constant(x), tf.constant(h))
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_h.numpy(), want_h.detach().numpy(), rtol=1e-5, atol=1e-6)
    # ``unroll`` (the recurrent WQMIX update's pass) and ``step`` (its acting) are the same net.
    want, want_h = theirs.unroll(torch.tensor(x), torch.tensor(h))
    got, got_h = ours.unroll(tf.constant(x), tf.constant(h))
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_h.numpy(), want_h.detach().numpy(), rtol=1e-5, atol=1e-6)
    got, got_h = ours.step(tf.constant(x[0]), tf.constant(h))
    np.testing.assert_allclose(got.numpy(), want[0].detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_h.numpy(), want_after[0].detach().numpy(), rtol=1e-5, atol=1e-6)


def test_agent_ids_follow_the_input_not_a_configured_batch_size() -> None:
    """Reference defect ``ids-from-config-batch-size``: ids are built for whatever batch comes
    in."""
    net = tf_agent_nets.AgentMLP(4, (8,), 2, 3, shared=True, activation="relu",
                                 rnn_hidden_size=None, rng=RNG, head_gain=1.0)  # fmt: skip
    for batch in (1, 5, 33):
        out, _ = net(tf.zeros((batch, 3, 4)))
        assert tuple(out.shape) == (batch, 3, 2)


def test_loading_is_all_or_nothing() -> None:
    net = tf_nets.MLP(3, (4,), 2, RNG)
    before = tf_nets.module_state("net", net)
    bad = dict(before)
    bad["net.layers.2.weight"] = np.zeros((3, 4), np.float32)  # wrong shape, loaded last
    bad["net.layers.0.weight"] = np.ones_like(before["net.layers.0.weight"])
    with pytest.raises(ValueError, match="layers.2.weight"):
        tf_nets.load_module("net", net, bad)
    missing = {k: v for k, v in before.items() if not k.endswith("layers.2.bias")}
    with pytest.raises(KeyError, match="layers.2.bias"):
        tf_nets.load_module("net", net, missing)
    for name, value in tf_nets.module_state("net", net).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_soft_update_and_copy() -> None:
    live, target = tf_nets.MLP(3, (4,), 2, RNG), tf_nets.MLP(3, (4,), 2, RNG)
    old = tf_nets.module_state("t", target)
    new = tf_nets.module_state("t", live)
    tf_nets.soft_update(target, live, 0.1)
    for name, value in tf_nets.module_state("t", target).items():
        np.testing.assert_allclose(value, old[name] + 0.1 * (new[name] - old[name]), rtol=1e-6)
    tf_nets.copy_into(target, live)
    for name, value in tf_nets.module_state("t", target).items():
        np.testing.assert_array_equal(value, new[name])
