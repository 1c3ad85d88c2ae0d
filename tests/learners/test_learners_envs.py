"""The env adapters: shapes, masks and padding, truncation vs termination with the final
observation, automatic reset, action scaling, per-episode seeding, and subprocess stepping."""

from __future__ import annotations

import numpy as np
import pytest

from learners.enums import EnvSuite
from learners.envs.base import episode_seed
from learners.envs.catalogue import GYMNASIUM_ENVS
from learners.envs.factory import default_workers, make_vec_env
from learners.envs.gymnasium_env import GymnasiumVecEnv
from learners.envs.mpe import MPEVecEnv
from learners.spec import EnvSpec

MPE_SHAPES = {
    # id: (agents, obs dims, state dim)
    "simple_spread_v3": (3, (18, 18, 18), 54),
    "simple_adversary_v3": (3, (8, 10, 10), 28),
    "simple_push_v3": (2, (8, 19), 27),
    "simple_tag_v3": (4, (16, 16, 16, 14), 62),
}


def zero_actions(env: GymnasiumVecEnv | MPEVecEnv) -> np.ndarray:
    info = env.info
    if info.action_kind == "discrete":
        return np.zeros((info.num_envs, info.num_agents), np.int64)
    return np.zeros((info.num_envs, info.num_agents, info.action_dim), np.float32)


@pytest.mark.parametrize("env_id", sorted(MPE_SHAPES))
@pytest.mark.parametrize("continuous", [False, True])
def test_mpe_shapes_padding_and_masks(env_id: str, continuous: bool) -> None:
    agents, obs_dims, state_dim = MPE_SHAPES[env_id]
    env = MPEVecEnv(env_id, {"continuous_actions": continuous}, 2, seed=0)
    info = env.info
    assert (info.num_agents, info.obs_dims, info.state_dim) == (agents, obs_dims, state_dim)
    assert info.obs_dim == max(obs_dims)
    assert info.action_kind == ("continuous" if continuous else "discrete")
    assert info.action_dim == 5
    obs = env.reset()
    assert obs.obs.shape == (2, agents, max(obs_dims)) and obs.obs.dtype == np.float32
    assert obs.state.shape == (2, state_dim)
    for j, dim in enumerate(obs_dims):
        assert obs.obs_mask[:, j, :dim].all() and not obs.obs_mask[:, j, dim:].any()
        assert not obs.obs[:, j, dim:].any(), "padding must be zero"
    assert obs.agent_mask.shape == (2, agents) and obs.agent_mask.all()
    assert obs.avail_actions.shape == (2, agents, 0 if continuous else 5)
    # MPE's global state is every agent's observation, concatenated in agent order.
    real = np.concatenate([obs.obs[0, j, :d] for j, d in enumerate(obs_dims)])
    np.testing.assert_array_equal(obs.state[0], real)
    env.close()


@pytest.mark.parametrize("env_id", sorted(GYMNASIUM_ENVS))
def test_gymnasium_shapes(env_id: str) -> None:
    env = GymnasiumVecEnv(env_id, {}, 2, seed=0)
    info = env.info
    assert info.num_agents == 1 and info.action_kind == "continuous"
    assert info.state_dim == info.obs_dim and info.max_episode_steps is not None
    obs = env.reset()
    assert obs.obs.shape == (2, 1, info.obs_dim) and obs.obs.dtype == np.float32
    assert obs.avail_actions.shape == (2, 1, 0) and obs.obs_mask.all()
    next_obs, tr = env.step(np.zeros((2, 1, info.action_dim), np.float32))
    assert tr.rewards.shape == (2, 1) and np.isfinite(tr.rewards).all()
    assert not np.array_equal(next_obs.obs, obs.obs)
    env.close()


def test_mpe_truncation_keeps_final_obs_and_resets() -> None:
    env = MPEVecEnv("simple_spread_v3", {"max_cycles": 5}, 2, seed=1)
    obs = env.reset()
    rewards = np.zeros((2, 3))
    for t in range(5):
        prev = obs.obs.copy()
        obs, tr = env.step(zero_actions(env))
        rewards += tr.rewards
        if t < 4:
            assert not (tr.truncated.any() or tr.terminated.any())
            np.testing.assert_array_equal(tr.final_obs, obs.obs)
            assert np.isnan(tr.episode_returns).all() and not tr.episode_lengths.any()
    assert tr.truncated.all() and not tr.terminated.any()
    np.testing.assert_array_equal(tr.episode_lengths, [5, 5])
    np.testing.assert_allclose(tr.episode_returns, rewards.mean(axis=1), rtol=1e-5)
    # The final obs continues the episode (agents drift from where they were); the new obs is a
    # fresh episode's first observation.
    assert not np.array_equal(tr.final_obs, obs.obs)
    np.testing.assert_array_equal(env.episode_index, [1, 1])
    fresh = MPEVecEnv("simple_spread_v3", {"max_cycles": 5}, 2, seed=1)
    np.testing.assert_array_equal(fresh.reset(episode_index=np.array([1, 1])).obs, obs.obs)
    assert prev.shape == obs.obs.shape


def test_gymnasium_termination_is_not_truncation() -> None:
    # A random Hopper falls over within a few dozen steps: a true termination.
    env = GymnasiumVecEnv("Hopper-v5", {}, 1, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    for _ in range(1000):
        obs, tr = env.step(rng.uniform(-1, 1, (1, 1, 3)).astype(np.float32))
        if tr.terminated[0] or tr.truncated[0]:
            break
    assert tr.terminated[0] and not tr.truncated[0]
    assert tr.episode_lengths[0] < 1000
    # The unhealthy final state is kept; the new obs is the next episode's start.
    assert not np.array_equal(tr.final_obs, obs.obs)
    env.close()


def test_gymnasium_truncation_final_obs_and_returns() -> None:
    env = GymnasiumVecEnv("Pendulum-v1", {}, 2, seed=5)
    obs = env.reset()
    total = np.zeros(2)
    for _ in range(200):
        before = obs.obs.copy()
        obs, tr = env.step(np.full((2, 1, 1), 0.5, np.float32))
        total += tr.rewards[:, 0]
    assert tr.truncated.all() and not tr.terminated.any()
    np.testing.assert_allclose(tr.episode_returns, total, rtol=1e-5)
    # Pendulum's observation moves smoothly: the final obs is near the one before it, while the
    # reset obs is a new random start.
    assert np.abs(tr.final_obs - before).max() < 1.0
    assert tr.final_obs.shape == (2, 1, 3) and tr.final_state.shape == (2, 3)
    np.testing.assert_array_equal(tr.final_state, tr.final_obs[:, 0])


def test_continuous_actions_are_scaled_onto_the_env_bounds() -> None:
    env = GymnasiumVecEnv("Pendulum-v1", {}, 1, seed=0)  # Box(-2, 2)
    env.reset()
    pendulum = env._envs[0].unwrapped
    for given, applied in [(1.0, 2.0), (-1.0, -2.0), (0.25, 0.5), (3.0, 2.0)]:
        env.step(np.full((1, 1, 1), given, np.float32))
        assert pendulum.last_u == pytest.approx(applied)
    mpe = MPEVecEnv("simple_spread_v3", {"continuous_actions": True}, 1, seed=0)
    mpe.reset()
    mpe.step(np.full((1, 3, 5), -1.0, np.float32))
    np.testing.assert_array_equal(mpe._action_dicts[0]["agent_0"], np.zeros(5))  # Box(0, 1)
    mpe.step(np.ones((1, 3, 5), np.float32))
    np.testing.assert_array_equal(mpe._action_dicts[0]["agent_0"], np.ones(5))


@pytest.mark.parametrize(
    ("cls", "env_id", "kwargs"),
    [(GymnasiumVecEnv, "Pendulum-v1", {}), (MPEVecEnv, "simple_adversary_v3", {})],
)
def test_seeding_per_copy_and_episode(cls: type, env_id: str, kwargs: dict) -> None:
    a, b = cls(env_id, kwargs, 3, seed=11), cls(env_id, kwargs, 3, seed=11)
    first = a.reset().obs.copy()
    np.testing.assert_array_equal(first, b.reset().obs)
    assert not np.array_equal(first[0], first[1]), "copies must play different episodes"
    assert not np.array_equal(first, cls(env_id, kwargs, 3, seed=12).reset().obs)
    # Copy 2 of a run is the same as copy 0 of an env whose first copy is the run's copy 2.
    shifted = cls(env_id, kwargs, 1, seed=11, first_copy=2)
    np.testing.assert_array_equal(shifted.reset().obs[0], first[2])
    # Episode k is seeded from (seed, copy, k), whatever happened before it.
    index = np.array([4, 0, 7])
    jumped = a.reset(episode_index=index).obs
    assert not np.array_equal(jumped[0], first[0])
    np.testing.assert_array_equal(jumped[1], first[1])
    assert episode_seed(11, 0, 4) != episode_seed(11, 4, 0)


def test_returned_arrays_are_double_buffered() -> None:
    env = MPEVecEnv("simple_spread_v3", {}, 2, seed=0)
    obs0 = env.reset()
    kept = obs0.obs.copy()
    obs1, _ = env.step(zero_actions(env))
    np.testing.assert_array_equal(obs0.obs, kept)  # still valid through the next step
    assert obs1.obs is not obs0.obs


def test_make_vec_env_and_render() -> None:
    spec = EnvSpec(suite=EnvSuite.MPE, id="simple_push_v3", num_envs=3, kwargs={"max_cycles": 10})
    env = make_vec_env(spec, seed=0, workers=0)
    assert env.info.num_envs == 3 and env.info.max_episode_steps == 10
    env.close()
    frame_env = make_vec_env(spec, seed=0, num_envs=1, render=True)
    frame_env.reset()
    frame = frame_env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8
    assert frame.std() > 0  # something is drawn
    frame_env.close()


@pytest.mark.slow
def test_subprocess_stepping_matches_in_process() -> None:
    spec = EnvSpec(suite=EnvSuite.MPE, id="simple_spread_v3", num_envs=4, kwargs={"max_cycles": 7})
    local = make_vec_env(spec, seed=2, workers=0)
    remote = make_vec_env(spec, seed=2, workers=2)
    try:
        assert type(remote).__name__ == "SubprocVecEnv"
        np.testing.assert_array_equal(local.reset().obs, remote.reset().obs)
        rng = np.random.default_rng(0)
        for _ in range(20):
            actions = rng.integers(0, 5, (4, 3))
            (lo, lt), (ro, rt) = local.step(actions), remote.step(actions)
            np.testing.assert_array_equal(lo.obs, ro.obs)
            np.testing.assert_array_equal(lo.state, ro.state)
            np.testing.assert_array_equal(lt.rewards, rt.rewards)
            np.testing.assert_array_equal(lt.truncated, rt.truncated)
            np.testing.assert_array_equal(lt.final_obs, rt.final_obs)
            np.testing.assert_array_equal(lt.episode_returns, rt.episode_returns)
        np.testing.assert_array_equal(local.episode_index, remote.episode_index)
    finally:
        local.close()
        remote.close()


def test_default_stepping_rule() -> None:
    assert default_workers(8, cpus=2) == 0  # a 2-core machine steps in process
    assert default_workers(8, cpus=16) == 2
    assert default_workers(64, cpus=16) == 15
    assert default_workers(4, cpus=16) == 0  # one worker would only add a round trip
