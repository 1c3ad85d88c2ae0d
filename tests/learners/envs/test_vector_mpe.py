"""The vector MPE engine equals mpe2: from mpe2's own initial states and under the same actions,
observations, rewards, ends and next world states agree to 1e-5 at every step of whole episodes;
and resets draw from mpe2's distributions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats

from learners.envs.mpe import parallel_env
from learners.envs.vector import SCENARIOS, VectorMPE, WorldState
from learners.envs.vector.world import Frame

TOL = 1e-5
COPIES = 3
# (env_id, kwargs) per scenario; each runs with discrete and with continuous actions.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("simple_spread_v3", {}),
    ("simple_spread_v3", {"N": 4, "local_ratio": 0.2, "max_cycles": 40}),
    ("simple_spread_v3", {"N": 2, "curriculum": True, "terminate_on_success": True}),
    ("simple_spread_v3", {"num_agent_neighbors": 1, "num_landmark_neighbors": 2}),
    ("simple_spread_v3", {"N": 4, "num_landmark_neighbors": 6}),
    ("simple_tag_v3", {}),
    ("simple_tag_v3", {"num_good": 2, "num_adversaries": 2, "num_obstacles": 3}),
    ("simple_tag_v3", {"num_good": 3, "num_adversaries": 1, "num_obstacles": 1, "max_cycles": 50}),
    ("simple_tag_v3", {"curriculum": True, "terminate_on_success": True, "max_cycles": 60}),
    ("simple_tag_v3", {"num_good": 2, "num_agent_neighbors": 2, "num_landmark_neighbors": 1}),
    ("simple_tag_v3", {"num_agent_neighbors": 6, "num_obstacles": 3}),
    ("simple_adversary_v3", {}),
    ("simple_adversary_v3", {"N": 4, "max_cycles": 30}),
    ("simple_adversary_v3", {"N": 3, "num_agent_neighbors": 2, "num_landmark_neighbors": 1}),
    ("simple_push_v3", {}),
    ("simple_push_v3", {"max_cycles": 50}),
]
CASES = [case for case in CASES if case[0] in SCENARIOS]


def world_state(envs: list[Any]) -> WorldState:
    """The world state of mpe2 parallel envs, one copy each."""
    worlds = [env.unwrapped.world for env in envs]
    goals = []
    for world in worlds:
        goal = getattr(world.agents[0], "_goal_a", None)
        goals.append(0 if goal is None else world.landmarks.index(goal))
    return WorldState(
        agent_pos=np.array([[a.state.p_pos for a in w.agents] for w in worlds], np.float64),
        agent_vel=np.array([[a.state.p_vel for a in w.agents] for w in worlds], np.float64),
        landmark_pos=np.array([[m.state.p_pos for m in w.landmarks] for w in worlds], np.float64),
        goal=np.array(goals, np.int64),
        steps=np.array([env.unwrapped.steps for env in envs], np.int64),
    )


def close(actual: Any, expected: Any, what: str) -> None:
    np.testing.assert_allclose(actual, expected, rtol=0, atol=TOL, err_msg=what)


def random_actions(rng: np.random.Generator, engine: VectorMPE) -> np.ndarray:
    shape = (engine.num_envs, engine.num_agents)
    if engine.continuous:
        return rng.random((*shape, engine.action_dim), dtype=np.float32)
    return rng.integers(0, engine.action_dim, shape)


def compare_obs(env: Any, engine: VectorMPE, obs: np.ndarray, observations: Any, i: int) -> None:
    """Copy ``i``'s engine observations (padded) and global state against its mpe2 env's."""
    for j, (agent, dim) in enumerate(zip(engine.agent_ids, engine.obs_dims, strict=True)):
        close(obs[i, j, :dim], observations[agent], f"obs of {agent}")
        assert not obs[i, j, dim:].any(), "padding must stay zero"
    close(engine.state()[i], env.state(), "global state")


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=str)
def test_steps_equal_mpe2(env_id: str, kwargs: dict[str, Any], continuous: bool) -> None:
    kwargs = {**kwargs, "continuous_actions": continuous}
    envs = [parallel_env(env_id, kwargs) for _ in range(COPIES)]
    initial = [env.reset(seed=100 + i)[0] for i, env in enumerate(envs)]
    engine = VectorMPE(env_id, kwargs, COPIES, seed=0)
    assert engine.agent_ids == tuple(envs[0].possible_agents)
    assert engine.max_cycles == envs[0].unwrapped.max_cycles
    obs = engine.set_state(world_state(envs))
    for i, env in enumerate(envs):
        compare_obs(env, engine, obs, initial[i], i)
    rng = np.random.default_rng(7)
    live = np.ones(COPIES, np.bool_)
    for _ in range(engine.max_cycles):
        actions = random_actions(rng, engine)
        obs, rewards, terminated, truncated = engine.step(actions)
        stepped = np.flatnonzero(live)
        for i in stepped:
            acts = {a: actions[i, j] for j, a in enumerate(engine.agent_ids)}
            observations, rewards_i, terminations, truncations, _ = envs[i].step(acts)
            compare_obs(envs[i], engine, obs, observations, i)
            close(rewards[i], [rewards_i[a] for a in engine.agent_ids], "rewards")
            assert terminated[i] == any(terminations.values()), "terminated"
            assert truncated[i] == any(truncations.values()), "truncated"
            live[i] = bool(envs[i].agents)
        expected, state = world_state(envs), engine.get_state()
        for name in ("agent_pos", "agent_vel", "landmark_pos", "goal", "steps"):
            close(getattr(state, name)[stepped], getattr(expected, name)[stepped], name)
    assert not live.any(), "every episode ends within max_cycles"
    for env in envs:
        env.close()


@pytest.mark.parametrize("env_id", sorted(SCENARIOS))
def test_reset_draws_from_mpe2_distributions(env_id: str) -> None:
    """Initial positions, velocities and goals follow mpe2's ``reset_world``: two-sample KS tests
    per body kind on the pooled coordinates, the same uniform bounds, and bodies at rest."""
    env = parallel_env(env_id, {})
    reference = []
    for seed in range(400):
        env.reset(seed=seed)
        reference.append(world_state([env]))
    env.close()
    engine = VectorMPE(env_id, {}, 4000, seed=1)
    engine.reset()
    drawn = engine.get_state()
    for name in ("agent_pos", "landmark_pos"):
        ours = getattr(drawn, name).ravel()
        theirs = np.concatenate([getattr(s, name).ravel() for s in reference])
        assert stats.ks_2samp(ours, theirs).pvalue > 1e-3, name
        bound = np.abs(theirs).max()
        assert np.abs(ours).max() <= bound + 0.01 and np.abs(ours).max() > bound - 0.01, name
    assert not drawn.agent_vel.any() and not drawn.steps.any()
    goals = np.concatenate([s.goal for s in reference])
    assert set(np.unique(drawn.goal)) == set(np.unique(goals))
    if len(np.unique(goals)) > 1:
        counts = np.bincount(drawn.goal)
        assert stats.chisquare(counts).pvalue > 1e-3
        assert stats.chisquare(np.bincount(goals)).pvalue > 1e-3


def test_reset_mask_restarts_only_the_chosen_copies() -> None:
    engine = VectorMPE("simple_spread_v3", {}, 4, seed=3)
    engine.reset()
    engine.step(np.ones((4, 3), np.int64))
    before = engine.get_state()
    engine.reset(np.array([False, True, False, False]))
    after = engine.get_state()
    assert after.steps.tolist() == [1, 0, 1, 1]
    np.testing.assert_array_equal(after.agent_pos[[0, 2, 3]], before.agent_pos[[0, 2, 3]])
    assert not (after.agent_pos[1] == before.agent_pos[1]).any()


def test_refuses_what_it_does_not_model() -> None:
    with pytest.raises(ValueError, match="no 'simple_crypto_v3'"):
        VectorMPE("simple_crypto_v3", {}, 2, seed=0)
    with pytest.raises(ValueError, match="simple_spread_v3"):
        VectorMPE("simple_spread_v3", {"num_good": 2}, 2, seed=0)


def put_state(env: Any, state: WorldState, i: int) -> None:
    """Place copy ``i`` of ``state`` into mpe2 env ``env``'s world."""
    world = env.unwrapped.world
    for j, agent in enumerate(world.agents):
        agent.state.p_pos = state.agent_pos[i, j].copy()
        agent.state.p_vel = state.agent_vel[i, j].copy()
    for j, landmark in enumerate(world.landmarks):
        landmark.state.p_pos = state.landmark_pos[i, j].copy()


@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=str)
def test_rewards_and_obs_equal_mpe2_in_far_states(env_id: str, kwargs: dict[str, Any]) -> None:
    """Rewards and observations of states random play rarely reaches (agents off the field, where
    simple_tag's boundary penalty grows, and fast): mpe2's scenario functions on the same state."""
    env = parallel_env(env_id, kwargs)
    env.reset(seed=0)
    engine = VectorMPE(env_id, kwargs, 64, seed=0)
    engine.reset()
    rng = np.random.default_rng(11)
    state = engine.get_state()
    state.agent_pos = rng.uniform(-2.5, 2.5, state.agent_pos.shape)
    state.agent_vel = rng.normal(0, 1, state.agent_vel.shape)
    # mpe2 colours simple_push's agent by its goal at reset: keep the goal the env drew.
    state.goal[:] = world_state([env]).goal[0]
    obs = engine.set_state(state)
    rewards = engine.scenario.rewards(Frame.of(engine.get_state())).T
    raw = env.unwrapped
    for i in range(engine.num_envs):
        put_state(env, state, i)
        expected = {a.name: raw.scenario.reward(a, raw.world) for a in raw.world.agents}
        if raw.local_ratio is not None:
            shared = raw.scenario.global_reward(raw.world)
            expected = {
                k: shared * (1 - raw.local_ratio) + v * raw.local_ratio for k, v in expected.items()
            }
        close(rewards[i], [expected[a] for a in engine.agent_ids], "rewards")
        compare_obs(env, engine, obs, {a: raw.observe(a) for a in engine.agent_ids}, i)
    env.close()


def test_continuous_actions_out_of_bounds_are_clipped_as_mpe2_clips_them() -> None:
    kwargs = {"continuous_actions": True}
    env = parallel_env("simple_tag_v3", kwargs)
    env.reset(seed=5)
    engine = VectorMPE("simple_tag_v3", kwargs, 1, seed=0)
    engine.set_state(world_state([env]))
    actions = np.random.default_rng(2).uniform(-1.5, 2.5, (1, 4, 5)).astype(np.float32)
    obs, rewards, _, _ = engine.step(actions)
    observations, expected, _, _, _ = env.step(dict(zip(engine.agent_ids, actions[0], strict=True)))
    compare_obs(env, engine, obs, observations, 0)
    close(rewards[0], [expected[a] for a in engine.agent_ids], "rewards")
    env.close()
