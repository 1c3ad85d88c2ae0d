"""PyTorch DDPG: one update against a textbook reference, the target without gradient (reference
defect ``target-with-gradient``, docs/reference-defects.md), soft-update math against NumPy,
termination vs truncation in the target, exploration."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np
import pytest
import torch

from learners.algorithms.ddpg import DDPGConfig, DDPGStats
from learners.backends.torch.ddpg import TorchDDPG
from learners.buffers.replay import ReplayBatch, ReplayBuffer
from learners.envs.gymnasium_env import GymnasiumVecEnv

CONFIG = DDPGConfig(hidden_sizes=(16, 16), batch_size=64, tau=0.05, gamma=0.9)


@pytest.fixture(scope="module")
def env() -> GymnasiumVecEnv:
    return GymnasiumVecEnv("Pendulum-v1", {}, 2, seed=0)


@pytest.fixture(scope="module")
def buffer(env: GymnasiumVecEnv) -> ReplayBuffer:
    """400 random transitions of Pendulum (two whole episodes per copy: truncations included)."""
    buf = ReplayBuffer(env.info, 1000)
    rng = np.random.default_rng(0)
    obs = env.reset()
    for _ in range(200):
        actions = rng.uniform(-1, 1, (2, 1, 1)).astype(np.float32)
        next_obs, tr = env.step(actions)
        buf.add(obs, actions, tr)
        obs = next_obs
    return buf


def batch_copy(buffer: ReplayBuffer, seed: int = 0, **changes: Any) -> ReplayBatch:
    batch = buffer.sample(64, np.random.default_rng(seed))
    arrays = {f.name: getattr(batch, f.name).copy() for f in fields(ReplayBatch)}
    arrays.update(changes)
    return ReplayBatch(**arrays)


def numpy_mlp(state: dict[str, np.ndarray], prefix: str, x: np.ndarray, tanh: bool) -> np.ndarray:
    """The MLP's forward pass in NumPy float64, from the checkpoint tensors (PyTorch layout)."""
    indices = sorted({int(k.split(".")[2]) for k in state if k.startswith(f"{prefix}.layers.")})
    h = x.astype(np.float64)
    for n, i in enumerate(indices):
        h = (
            h @ state[f"{prefix}.layers.{i}.weight"].T.astype(np.float64)
            + state[f"{prefix}.layers.{i}.bias"]
        )
        if n < len(indices) - 1:
            h = np.maximum(h, 0.0)
    return np.tanh(h) if tanh else h


def test_update_returns_finite_typed_stats(env: GymnasiumVecEnv, buffer: ReplayBuffer) -> None:
    learner = TorchDDPG(CONFIG, env.info, "cpu", seed=0)
    stats = learner.update(batch_copy(buffer))
    assert isinstance(stats, DDPGStats)
    assert set(stats.as_dict()) == {
        "loss_actor", "loss_critic", "q_value", "td_target", "grad_norm_actor", "grad_norm_critic",
    }  # fmt: skip
    assert all(np.isfinite(v) for v in stats.as_dict().values())


def test_one_update_matches_the_textbook_update(env: GymnasiumVecEnv, buffer: ReplayBuffer) -> None:
    """Critic: MSE to a constant target, one Adam step; then actor: -Q(s, mu(s)) through the
    updated critic, one Adam step."""
    learner, ref = TorchDDPG(CONFIG, env.info, "cpu", 0), TorchDDPG(CONFIG, env.info, "cpu", 0)
    batch = batch_copy(buffer)
    learner.update(batch)

    t = {f.name: torch.as_tensor(getattr(batch, f.name)) for f in fields(ReplayBatch)}
    with torch.no_grad():
        next_a = ref.target_actor(t["next_obs"])
        q_next = ref.target_critic(torch.cat([t["next_obs"], next_a], -1)).squeeze(-1)
        y = t["rewards"] + CONFIG.gamma * (1 - t["terminated"][:, None]) * q_next
    q = ref.critic(torch.cat([t["obs"], t["actions"]], -1)).squeeze(-1)
    ref.critic_optimizer.zero_grad()
    ((q - y) ** 2).mean().backward()
    ref.critic_optimizer.step()
    ref.actor_optimizer.zero_grad()
    (-ref.critic(torch.cat([t["obs"], ref.actor(t["obs"])], -1)).mean()).backward()
    ref.actor_optimizer.step()

    for net in ("actor", "critic"):
        for (name, a), b in zip(
            getattr(learner, net).named_parameters(), getattr(ref, net).parameters(), strict=True
        ):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"{net}.{name}")


def test_target_q_carries_no_gradient(env: GymnasiumVecEnv, buffer: ReplayBuffer) -> None:
    """Reference defect ``target-with-gradient``: the reference computed Q'(s', mu'(s')) with
    gradient tracking on."""
    seen: list[bool] = []

    class Probe(TorchDDPG):
        def _q(
            self, obs: torch.Tensor, actions: torch.Tensor, *, target: bool = False
        ) -> torch.Tensor:
            q = super()._q(obs, actions, target=target)
            if target:
                seen.append(q.requires_grad or actions.requires_grad)
            return q

    learner = Probe(CONFIG, env.info, "cpu", 0)
    learner.update(batch_copy(buffer))
    assert seen == [False]
    for net in (learner.target_actor, learner.target_critic):
        assert all(p.grad is None and not p.requires_grad for p in net.parameters())


def test_soft_update_math(env: GymnasiumVecEnv, buffer: ReplayBuffer) -> None:
    learner = TorchDDPG(CONFIG, env.info, "cpu", 0)
    learner.update(batch_copy(buffer, seed=1))  # targets and live nets now differ
    before = learner.state()
    learner.update(batch_copy(buffer, seed=2))
    after = learner.state()
    for live in ("actor", "critic"):
        for name in (k for k in before if k.startswith(f"{live}.")):
            target = f"target_{name}"
            expected = (1 - CONFIG.tau) * before[target].astype(np.float64) + CONFIG.tau * after[
                name
            ]
            np.testing.assert_allclose(
                after[target], expected, rtol=1e-5, atol=1e-7, err_msg=target
            )


def test_termination_stops_the_bootstrap_and_truncation_does_not(
    env: GymnasiumVecEnv, buffer: ReplayBuffer
) -> None:
    learner = TorchDDPG(CONFIG, env.info, "cpu", 0)
    learner.update(batch_copy(buffer))
    state = learner.state()
    batch = batch_copy(buffer, seed=3)
    assert (batch.terminated == 0).all()  # Pendulum only truncates

    next_a = numpy_mlp(state, "target_actor", batch.next_obs, tanh=True)
    q_next = numpy_mlp(state, "target_critic", np.concatenate([batch.next_obs, next_a], -1), False)
    bootstrapped = batch.rewards + CONFIG.gamma * q_next[..., 0]
    twin = TorchDDPG(CONFIG, env.info, "cpu", 0)
    twin.load_state(state)
    assert twin.update(batch).td_target == pytest.approx(bootstrapped.mean(), rel=1e-4)

    ended = batch_copy(buffer, seed=3, terminated=np.ones(64, np.float32))
    twin.load_state(state)
    assert twin.update(ended).td_target == pytest.approx(float(ended.rewards.mean()), rel=1e-6)


def test_exploration_noise_and_determinism(env: GymnasiumVecEnv) -> None:
    learner = TorchDDPG(CONFIG.model_copy(update={"exploration_noise": 0.3}), env.info, "cpu", 0)
    obs = env.reset()
    greedy = learner.act(obs, explore=False)
    assert greedy.shape == (2, 1, 1) and np.abs(greedy).max() <= 1.0
    np.testing.assert_array_equal(greedy, learner.act(obs, explore=False))
    noisy = np.stack([learner.act(obs, explore=True) for _ in range(400)])
    assert np.abs(noisy).max() <= 1.0
    # Near-zero initial actions: the noise is N(0, 0.3^2), barely clipped.
    assert noisy.std() == pytest.approx(0.3, rel=0.1)
    with pytest.raises(ValueError, match="continuous"):
        TorchDDPG(
            CONFIG, type(env.info)(**{**env.info.__dict__, "action_kind": "discrete"}), "cpu", 0
        )
