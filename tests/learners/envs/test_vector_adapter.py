"""The vector engine's ``VecEnv`` equals ``MPEVecEnv``: with the same seed and the same actions,
over several episodes across automatic resets, every array the learners read agrees to 1e-5 at
every step (the initial states exactly: both draw each episode from the same seed, in mpe2's
order)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from learners.envs.base import Observation, Transition
from learners.envs.mpe import MPEVecEnv
from learners.envs.vector.adapter import VectorVecEnv

TOL = 1e-5
COPIES = 3
TERMINATING = {"curriculum": True, "max_cycles": 40, "terminate_on_success": True}
CASES: list[tuple[str, dict[str, Any]]] = [
    ("simple_spread_v3", {}),
    ("simple_spread_v3", {"N": 2, "max_cycles": 7, "terminate_on_success": True}),
    ("simple_adversary_v3", {"N": 3, "max_cycles": 10}),
    ("simple_push_v3", {"max_cycles": 9}),
    ("simple_tag_v3", {"max_cycles": 11}),
    # Random play ends some of these episodes by termination (the prey caught), not only by time.
    ("simple_tag_v3", {"num_adversaries": 4, "num_obstacles": 0, **TERMINATING}),
]
OBSERVATION_FIELDS = ("obs", "obs_mask", "state", "agent_mask", "avail_actions")


def assert_same_info(vector: VectorVecEnv, mpe: MPEVecEnv) -> None:
    ours, theirs = dataclasses.asdict(vector.info), dataclasses.asdict(mpe.info)
    for name, value in theirs.items():
        if isinstance(value, np.ndarray):
            assert ours[name].dtype == value.dtype, name
            np.testing.assert_array_equal(ours[name], value, err_msg=name)
        else:
            assert ours[name] == value, name


def assert_same_obs(ours: Observation, theirs: Observation, step: int) -> None:
    for name in OBSERVATION_FIELDS:
        a, b = getattr(ours, name), getattr(theirs, name)
        assert a.shape == b.shape and a.dtype == b.dtype, name
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL, err_msg=f"{name} at step {step}")


def assert_same_transition(ours: Transition, theirs: Transition, step: int) -> None:
    for field in dataclasses.fields(Transition):
        a, b = getattr(ours, field.name), getattr(theirs, field.name)
        assert a.shape == b.shape and a.dtype == b.dtype, field.name
        what = f"{field.name} at step {step}"
        if a.dtype == np.bool_ or a.dtype == np.int64:
            np.testing.assert_array_equal(a, b, err_msg=what)
        else:
            # NaN where no episode ended, in both.
            np.testing.assert_allclose(a, b, rtol=0, atol=TOL, equal_nan=True, err_msg=what)


def random_actions(rng: np.random.Generator, vector: VectorVecEnv) -> np.ndarray:
    info = vector.info
    if info.action_kind == "continuous":
        # Beyond [-1, 1] too: both adapters clip.
        shape = (info.num_envs, info.num_agents, info.action_dim)
        return rng.uniform(-1.2, 1.2, shape).astype(np.float32)
    return rng.integers(0, info.action_dim, (info.num_envs, info.num_agents))


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=str)
def test_vec_env_equals_mpe_vec_env(env_id: str, kwargs: dict[str, Any], continuous: bool) -> None:
    kwargs = {**kwargs, "continuous_actions": continuous}
    vector = VectorVecEnv(env_id, kwargs, COPIES, seed=11, first_copy=2)
    mpe = MPEVecEnv(env_id, kwargs, COPIES, seed=11, first_copy=2)
    assert_same_info(vector, mpe)
    # Copies start at different episode indices, as a resumed run's do.
    start = np.array([0, 4, 1], np.int64)
    ours, theirs = vector.reset(episode_index=start), mpe.reset(episode_index=start)
    # The initial states are not just close: both drew them from the same generator.
    np.testing.assert_array_equal(ours.obs, theirs.obs)
    np.testing.assert_array_equal(ours.state, theirs.state)
    rng = np.random.default_rng(3)
    max_steps = vector.info.max_episode_steps
    assert max_steps is not None
    ended = terminations = 0
    steps = 5 * max_steps if kwargs.get("curriculum") else 3 * max_steps + 2
    for step in range(steps):
        actions = random_actions(rng, vector)
        ours, our_transition = vector.step(actions)
        theirs, their_transition = mpe.step(actions)
        assert_same_obs(ours, theirs, step)
        assert_same_transition(our_transition, their_transition, step)
        np.testing.assert_array_equal(vector.episode_index, mpe.episode_index)
        ended += int((their_transition.terminated | their_transition.truncated).sum())
        terminations += int(their_transition.terminated.sum())
    assert ended >= 3 * COPIES, "several episodes per copy, across automatic resets"
    if kwargs.get("curriculum"):
        assert terminations > 0, "some episodes end by termination"
    mpe.close()
    vector.close()


def test_reset_with_a_new_seed_equals_mpe_vec_env() -> None:
    vector = VectorVecEnv("simple_spread_v3", {}, 2, seed=0)
    mpe = MPEVecEnv("simple_spread_v3", {}, 2, seed=0)
    np.testing.assert_array_equal(vector.reset(seed=5).obs, mpe.reset(seed=5).obs)
    assert not np.array_equal(vector.reset(seed=6).obs, mpe.reset(seed=5).obs)
    mpe.close()


def test_vector_env_does_not_render() -> None:
    with pytest.raises(ValueError, match="render on mpe2"):
        VectorVecEnv("simple_spread_v3", {}, 1, seed=0, render=True)
