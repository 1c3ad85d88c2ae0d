"""The replay buffer: rows per env copy, wrap-around, final observations, sampling, state."""

from __future__ import annotations

import numpy as np

from learners.buffers.replay import ReplayBuffer
from learners.envs.mpe import MPEVecEnv
from learners.runners.off_policy import random_actions


def fill(env: MPEVecEnv, buffer: ReplayBuffer, steps: int) -> list[tuple]:
    rng = np.random.default_rng(0)
    obs = env.reset()
    kept = []
    for _ in range(steps):
        actions = random_actions(env.info, obs, rng)
        next_obs, tr = env.step(actions)
        buffer.add(obs, actions, tr)
        kept.append(
            (
                obs.obs.copy(),
                actions.copy(),
                tr.rewards.copy(),
                tr.final_obs.copy(),
                tr.truncated.copy(),
            )
        )
        obs = next_obs
    return kept


def test_rows_wrap_and_keep_the_final_observation() -> None:
    env = MPEVecEnv("simple_adversary_v3", {"max_cycles": 4}, 3, seed=0)
    buffer = ReplayBuffer(env.info, capacity=10, with_state=True)
    kept = fill(env, buffer, 6)  # 18 rows into 10: wraps
    assert buffer.size == 10 and buffer.position == 18 % 10
    data = buffer._data
    # The newest step (rows 15..17 -> slots 5..7) is exactly what the env gave.
    obs, actions, rewards, final_obs, _ = kept[-1]
    np.testing.assert_array_equal(data["obs"][5:8], obs)
    np.testing.assert_array_equal(data["actions"][5:8], actions)
    np.testing.assert_array_equal(data["rewards"][5:8], rewards)
    # Step 4 ended every episode (max_cycles=4): next_obs holds the last observation, not the reset.
    _, _, _, final_obs, truncated = kept[3]
    assert truncated.all()
    np.testing.assert_array_equal(data["next_obs"][(9 + np.arange(3)) % 10], final_obs)
    assert data["actions"].dtype == np.int64 and data["avail_actions"].shape == (10, 3, 5)
    assert data["state"].shape == (10, env.info.state_dim)


def test_sample_shapes_and_state_round_trip() -> None:
    env = MPEVecEnv("simple_spread_v3", {"continuous_actions": True}, 2, seed=0)
    buffer = ReplayBuffer(env.info, capacity=100)
    fill(env, buffer, 20)
    batch = buffer.sample(16, np.random.default_rng(1))
    assert batch.obs.shape == (16, 3, 18) and batch.actions.shape == (16, 3, 5)
    assert batch.state.shape == (16, 0) and batch.terminated.shape == (16,)
    assert np.abs(batch.actions).max() <= 1.0

    restored = ReplayBuffer(env.info, capacity=100)
    restored.load_state(buffer.state())
    assert (restored.size, restored.position) == (buffer.size, buffer.position)
    again = restored.sample(16, np.random.default_rng(1))
    np.testing.assert_array_equal(
        again.next_obs, buffer.sample(16, np.random.default_rng(1)).next_obs
    )


def test_random_actions_respect_availability() -> None:
    env = MPEVecEnv("simple_spread_v3", {}, 4, seed=0)
    obs = env.reset()
    avail = obs.avail_actions.copy()
    avail[:, :, :4] = 0.0  # only action 4 is available
    masked = type(obs)(obs.obs, obs.obs_mask, obs.state, obs.agent_mask, avail)
    actions = random_actions(env.info, masked, np.random.default_rng(0))
    assert actions.shape == (4, 3) and (actions == 4).all()
    spread = random_actions(env.info, obs, np.random.default_rng(0))
    assert len(np.unique(spread)) > 1
