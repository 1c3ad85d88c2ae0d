"""A policy fed what an env returns (learners.exports.env_io through Policy.act): PettingZoo dicts
and arrays, one env or a batch, action masks; its actions are what the service's own env adapter
would send the env, and a real env takes them. Bad input names the agent and the shape expected."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest

from learners import checkpoint
from learners.checkpoint import write
from learners.enums import Algorithm, Backend
from learners.envs.base import Observation
from learners.envs.factory import make_vec_env
from learners.exports.env_io import EnvInputError
from learners.policy import Policy, load_policy
from learners.registry import entry
from learners.spec import ExperimentSpec
from tests.learners.test_learners_checkpoint import manifest_for


def _policy(spec: ExperimentSpec, folder: Path) -> Policy:
    """The greedy policy of a fresh learner for ``spec``, through a checkpoint file."""
    env = make_vec_env(spec.env, spec.seed)
    learner = entry(spec.algorithm).learner_class(Backend.TORCH)(
        spec.config(), env.info, "cpu", spec.seed
    )
    path = folder / "policy.safetensors"
    write(path, learner.state(), manifest_for(spec, checkpoint.env_info_to_json(env.info)))
    env.close()
    return load_policy(path)


def _as_dict(policy: Policy, observation: Observation, copy: int = 0) -> dict[str, Any]:
    info = policy.info
    return {
        agent: observation.obs[copy, j, : info.obs_dims[j]].copy()
        for j, agent in enumerate(info.agent_ids)
    }


def _mpe_spec(make_spec: Callable[..., ExperimentSpec], algorithm: Algorithm, **env: Any) -> Any:
    base = make_spec(algorithm)
    return make_spec(algorithm, env={**base.env.model_dump(), **env})


def test_a_pettingzoo_dict_gets_the_actions_the_adapter_would_send_and_the_env_takes_them(
    make_spec: Callable[..., ExperimentSpec], tmp_path: Path
) -> None:
    spec = _mpe_spec(make_spec, Algorithm.MADDPG, num_envs=1, kwargs={"continuous_actions": True})
    policy = _policy(spec, tmp_path)
    adapter = make_vec_env(spec.env, 5)
    observation = adapter.reset()

    actions = policy.act(_as_dict(policy, observation))

    # The same greedy actions, mapped from [-1, 1] onto the env's bounds as the docs say.
    unit = np.clip(policy.act(observation)[0], -1.0, 1.0)
    low, high = policy.info.action_low, policy.info.action_high
    assert low is not None and high is not None
    assert set(actions) == set(policy.info.agent_ids)
    for j, agent in enumerate(policy.info.agent_ids):
        expected = low + (unit[j] + 1.0) * 0.5 * (high - low)
        np.testing.assert_allclose(actions[agent], expected, rtol=1e-6, atol=1e-7)
    adapter.close()
    # mpe2 itself, stepped with the policy's actions for a whole episode.
    env = importlib.import_module("mpe2.simple_spread_v3").parallel_env(continuous_actions=True)
    observations, _ = env.reset(seed=3)
    steps = 0
    while env.agents:
        chosen = policy.act(observations)
        assert all(env.action_space(a).contains(chosen[a]) for a in env.agents)
        observations, *_ = env.step(chosen)
        steps += 1
    assert steps == 25
    env.close()


def test_a_batch_axis_is_kept_and_each_row_acts_as_alone(
    make_spec: Callable[..., ExperimentSpec], tmp_path: Path
) -> None:
    spec = _mpe_spec(make_spec, Algorithm.MAPPO, num_envs=3)
    policy = _policy(spec, tmp_path)
    adapter = make_vec_env(spec.env, 8)
    observation = adapter.reset()
    rows = [_as_dict(policy, observation, copy) for copy in range(3)]
    batch = {agent: np.stack([row[agent] for row in rows]) for agent in policy.info.agent_ids}

    together = policy.act(batch)
    alone = [policy.act(row) for row in rows]

    for agent in policy.info.agent_ids:
        assert together[agent].shape == (3,) and together[agent].dtype == np.int64
        assert together[agent].tolist() == [a[agent] for a in alone]
        assert all(isinstance(a[agent], int) for a in alone)
    stacked = np.stack([observation.obs[c] for c in range(3)])  # (3, N, obs_dim): an array in
    assert policy.act(stacked).tolist() == [[a[g] for g in policy.info.agent_ids] for a in alone]
    adapter.close()


def test_an_action_mask_is_obeyed_and_one_that_allows_nothing_is_refused(
    make_spec: Callable[..., ExperimentSpec], tmp_path: Path
) -> None:
    spec = _mpe_spec(make_spec, Algorithm.WQMIX, num_envs=1)
    policy = _policy(spec, tmp_path)
    adapter = make_vec_env(spec.env, 2)
    observations = _as_dict(policy, adapter.reset())
    first, second = policy.info.agent_ids[:2]
    only_three = np.zeros(policy.info.action_dim, np.float32)
    only_three[3] = 1.0

    masked = policy.act(observations, action_masks={first: only_three})
    in_dict = policy.act({**observations, second: {"observation": observations[second],
                                                   "action_mask": only_three}})  # fmt: skip

    assert masked[first] == 3 and in_dict[second] == 3
    with pytest.raises(EnvInputError, match=f"agent {first}: its action mask allows no action"):
        policy.act(observations, action_masks={first: np.zeros_like(only_three)})
    adapter.close()


def test_agents_of_different_sizes_get_their_own_actions(
    make_spec: Callable[..., ExperimentSpec], tmp_path: Path
) -> None:
    spec = make_spec(Algorithm.MAPPO, env={"suite": "mpe", "id": "simple_speaker_listener_v4"})
    policy = _policy(spec, tmp_path)
    env = importlib.import_module("mpe2.simple_speaker_listener_v4").parallel_env()
    observations, _ = env.reset(seed=1)
    assert {a: o.shape for a, o in observations.items()} == {
        "speaker_0": (3,),
        "listener_0": (11,),
    }

    for _ in range(5):
        chosen = policy.act(observations)
        assert all(env.action_space(a).contains(chosen[a]) for a in env.agents)
        observations, *_ = env.step(chosen)
    with pytest.raises(EnvInputError, match="pass the observations as a dict"):
        policy.act(np.zeros((2, 11), np.float32))
    env.close()


def test_a_single_agent_policy_takes_the_gymnasium_envs_array(
    make_spec: Callable[..., ExperimentSpec], tmp_path: Path
) -> None:
    policy = _policy(make_spec(Algorithm.DDPG), tmp_path)
    env = gymnasium.make("Pendulum-v1")
    observation, _ = env.reset(seed=4)

    action = policy.act(observation)
    batch = policy.act(np.stack([observation, observation * 0.5]))

    assert action.shape == (1,) and env.action_space.contains(action)
    assert batch.shape == (2, 1) and np.allclose(batch[0], action)
    internal = policy.act(
        Observation(
            obs=observation.reshape(1, 1, 3).astype(np.float32),
            obs_mask=np.ones((1, 1, 3), np.float32),
            state=np.zeros((1, policy.info.state_dim), np.float32),
            agent_mask=np.ones((1, 1), np.float32),
            avail_actions=np.zeros((1, 1, 0), np.float32),
        )
    )
    np.testing.assert_allclose(action, 2.0 * np.clip(internal[0, 0], -1, 1), rtol=1e-6)
    env.step(action)
    env.close()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"agent_0": np.zeros(5)}, r"agent agent_0: observation of shape \(5,\), expected \(18,\)"),
        ({"nobody": np.zeros(18)}, r"agents \['nobody'\] are not the env's"),
        ({}, "no agent's observation was given"),
        (np.zeros((4, 18)), r"observations of shape \(4, 18\), expected \(3, 18\)"),
    ],
)
def test_input_that_does_not_fit_names_the_agent_and_the_shape(
    make_spec: Callable[..., ExperimentSpec], tmp_path: Path, given: Any, message: str
) -> None:
    policy = _policy(make_spec(Algorithm.IPPO), tmp_path)

    with pytest.raises(EnvInputError, match=message):
        policy.act(given)
