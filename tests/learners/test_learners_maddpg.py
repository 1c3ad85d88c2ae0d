"""PyTorch MADDPG: the centralised critic's inputs, agent ids from the batch's real size
(reference defect ``ids-from-config-batch-size``, docs/reference-defects.md), discrete actions
through Gumbel-softmax, separate parameters, and the update itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learners.algorithms.maddpg import MADDPGConfig, explore_discrete, greedy_discrete
from learners.backends.torch.maddpg import TorchMADDPG
from learners.buffers.replay import ReplayBuffer
from learners.envs.mpe import MPEVecEnv
from learners.runners.off_policy import random_actions

SMALL = {"hidden_sizes": (16, 16), "batch_size": 64}


def filled(env: MPEVecEnv, steps: int = 40) -> ReplayBuffer:
    buffer = ReplayBuffer(env.info, 500)
    rng = np.random.default_rng(0)
    obs = env.reset()
    for _ in range(steps):
        actions = random_actions(env.info, obs, rng)
        next_obs, tr = env.step(actions)
        buffer.add(obs, actions, tr)
        obs = next_obs
    return buffer


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("share", [True, False])
def test_update_and_act(continuous: bool, share: bool) -> None:
    env = MPEVecEnv("simple_adversary_v3", {"continuous_actions": continuous}, 2, seed=0)
    config = MADDPGConfig(**SMALL, share_parameters=share)
    learner = TorchMADDPG(config, env.info, "cpu", seed=0)
    buffer = filled(env)
    before = {k: v.copy() for k, v in learner.state().items()}
    # A batch smaller than batch_size (reference defect ids-from-config-batch-size: ids were
    # built for batch_size rows).
    for size in (64, 5):
        stats = learner.update(buffer.sample(size, np.random.default_rng(size)))
        assert all(np.isfinite(v) for v in stats.as_dict().values())
    after = learner.state()
    # simple_adversary has two teams: shared parameters are one actor per team.
    first = "actor.teams.0.layers.0.weight" if share else "actor.agents.0.layers.0.weight"
    assert not np.allclose(before[first], after[first])
    obs = env.reset()
    greedy = learner.act(obs, explore=False)
    np.testing.assert_array_equal(greedy, learner.act(obs, explore=False))
    if continuous:
        assert greedy.shape == (2, 3, 5) and np.abs(greedy).max() <= 1.0
    else:
        assert greedy.shape == (2, 3) and greedy.dtype == np.int64
        assert ((greedy >= 0) & (greedy < 5)).all()


def test_critic_is_centralised_and_actor_is_not() -> None:
    """Changing agent 1's observation changes agent 0's Q value but never agent 0's action."""
    env = MPEVecEnv("simple_spread_v3", {"continuous_actions": True}, 1, seed=0)
    learner = TorchMADDPG(MADDPGConfig(**SMALL), env.info, "cpu", seed=0)
    obs = torch.as_tensor(env.reset().obs)
    changed = obs.clone()
    changed[:, 1] += 1.0
    avail = torch.ones(1, 3, 0)
    with torch.no_grad():
        a, a2 = learner._policy(obs, avail), learner._policy(changed, avail)
        q, q2 = learner._q(obs, a), learner._q(changed, a)
    torch.testing.assert_close(a[:, 0], a2[:, 0])
    assert not torch.allclose(a[:, 1], a2[:, 1])
    assert not torch.allclose(q[:, 0], q2[:, 0])
    assert q.shape == (1, 3)


def test_agents_differ_through_their_ids() -> None:
    """With shared parameters, identical observations still give per-agent actions (one-hot ids)."""
    env = MPEVecEnv("simple_spread_v3", {"continuous_actions": True}, 1, seed=0)
    learner = TorchMADDPG(MADDPGConfig(**SMALL), env.info, "cpu", seed=0)
    same = torch.zeros(4, 3, env.info.obs_dim)
    with torch.no_grad():
        actions = learner._policy(same, torch.ones(4, 3, 0))
    assert not torch.allclose(actions[:, 0], actions[:, 1])


def test_straight_through_gumbel_policy_is_one_hot_with_gradient() -> None:
    env = MPEVecEnv("simple_spread_v3", {}, 1, seed=0)
    learner = TorchMADDPG(MADDPGConfig(**SMALL), env.info, "cpu", seed=0)
    obs = torch.as_tensor(env.reset().obs).expand(8, 3, -1)
    avail = torch.ones(8, 3, 5)
    sample = learner._policy(obs, avail)
    assert torch.equal(sample.detach().sum(-1), torch.ones(8, 3))
    assert set(sample.detach().unique().tolist()) <= {0.0, 1.0}
    sample[..., 0].sum().backward()
    assert learner.actor.layers[0].weight.grad is not None
    assert learner.actor.layers[0].weight.grad.abs().sum() > 0
    target = learner._policy(obs, avail, target=True)
    assert not target.requires_grad and torch.equal(target.sum(-1), torch.ones(8, 3))


def test_discrete_exploration_respects_availability() -> None:
    rng = np.random.default_rng(0)
    logits = np.zeros((100, 2, 4), np.float32)
    avail = np.ones_like(logits)
    avail[:, 1, 1:] = 0.0
    drawn = explore_discrete(logits, avail, rng)
    assert (drawn[:, 1] == 0).all() and len(np.unique(drawn[:, 0])) == 4
    logits[:, 0, 2] = 5.0
    assert (greedy_discrete(logits, avail)[:, 0] == 2).all()
