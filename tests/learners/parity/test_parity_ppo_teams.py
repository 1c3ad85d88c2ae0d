"""MAPPO and IPPO on a scenario with two teams (simple_tag: three adversaries against one agent):
every agent learns from its own reward, nothing is averaged over the teams, and MAPPO's
centralised critic gives each agent a value of the global state and its own id.

The targets are the host-side ``rollout_targets`` every backend's PPO calls; the critic test runs
each backend's own value pass.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from parity_cases import Variant, rollout_buffer

from learners.algorithms.ppo import IPPOConfig, MAPPOConfig, PPOConfig, rollout_targets
from learners.buffers.rollout import RolloutBuffer
from learners.enums import Algorithm, Backend
from learners.envs.base import EnvInfo
from learners.envs.mpe import MPEVecEnv
from learners.functional.normalizer import ValueNormalizer
from learners.registry import built_pairs, entry

ADVERSARIES, AGENT = [0, 1, 2], 3


@functools.cache
def _tag_info() -> EnvInfo:
    env = MPEVecEnv("simple_tag_v3", {"continuous_actions": False}, 3, seed=0)
    env.close()
    assert env.info.teams == ("adversary",) * 3 + ("agent",)
    return env.info


def _config(cls: type[PPOConfig], **overrides: Any) -> PPOConfig:
    return cls(hidden_sizes=(16, 16), rollout_length=12, **overrides)


def _rollout(config: PPOConfig, seed: int = 0) -> RolloutBuffer:
    """A finished rollout of simple_tag's shapes (dead agents, ended episodes, random values)."""
    buffer = rollout_buffer(Variant("tag", config, _tag_info()), seed)
    rng = np.random.default_rng(seed + 1)
    for name in ("values", "next_values"):
        getattr(buffer, name)[:] = rng.normal(size=buffer.values.shape)
    return buffer


def _targets(config: PPOConfig, buffer: RolloutBuffer) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and the value targets in reward units."""
    normalizer = ValueNormalizer()
    targets = rollout_targets(config, buffer, normalizer)
    returns = normalizer.denormalize(targets.returns) if config.value_norm else targets.returns
    return targets.advantages, returns


@pytest.mark.parametrize("cls", [MAPPOConfig, IPPOConfig], ids=["mappo", "ippo"])
@pytest.mark.parametrize("advantage_norm", [True, False])
def test_each_agent_learns_from_its_own_reward(cls: type[PPOConfig], advantage_norm: bool) -> None:
    """The adversaries' rewards changed (scaled and shifted, as a winning side's would be): the
    agent's advantages and value targets stay as they were; the adversaries' move."""
    config = _config(cls, advantage_norm=advantage_norm)
    buffer = _rollout(config)
    advantages, returns = _targets(config, buffer)
    changed = _rollout(config)
    changed.rewards[..., ADVERSARIES] = 5.0 * changed.rewards[..., ADVERSARIES] + 10.0
    advantages_changed, returns_changed = _targets(config, changed)
    live = buffer.agent_mask[..., AGENT] > 0.5
    np.testing.assert_allclose(
        advantages_changed[..., AGENT][live], advantages[..., AGENT][live], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(returns_changed[..., AGENT], returns[..., AGENT], rtol=1e-4)
    assert not np.allclose(returns_changed[..., ADVERSARIES], returns[..., ADVERSARIES])


def test_advantages_are_standardised_within_each_team() -> None:
    config = _config(MAPPOConfig)
    buffer = _rollout(config)
    buffer.rewards[..., ADVERSARIES] += 10.0  # one side far ahead of the other
    advantages, _ = _targets(config, buffer)
    for members in (ADVERSARIES, [AGENT]):
        live = buffer.agent_mask[..., members] > 0.5
        kept = advantages[..., members][live]
        assert kept.mean() == pytest.approx(0.0, abs=1e-5)
        assert kept.std() == pytest.approx(1.0, abs=1e-3)


MAPPO_BACKENDS = [b for a, b in built_pairs() if a == Algorithm.MAPPO]


def _values(learner: Any, config: PPOConfig, change: Any = None) -> np.ndarray:
    """The learner's value pass over ``_rollout(config)``, after ``change`` edits the rollout."""
    buffer = _rollout(config)
    if change is not None:
        change(buffer)
    learner._value_pass(buffer)
    return buffer.values.copy()


def _shift_observations(agents: Any) -> Any:
    """A change that adds 1 to the observations of ``agents`` (every one, an ended episode's final
    one and the one after the last step)."""

    def change(buffer: RolloutBuffer) -> None:
        for name in ("obs", "final_obs", "last_obs"):
            getattr(buffer, name)[..., agents, :] += 1.0

    return change


def _shift_state(buffer: RolloutBuffer) -> None:
    buffer.state += 1.0


@pytest.mark.parametrize("backend", MAPPO_BACKENDS, ids=str)
def test_mappos_critic_values_the_global_state_and_the_agents_own_id(backend: Backend) -> None:
    """Each agent's value depends on the global state and its id, never on the observations;
    with shared parameters agents of one state still get their own values (their ids)."""
    config = _config(MAPPOConfig, value_norm=False)
    learner = entry(Algorithm.MAPPO).learner_class(backend)(config, _tag_info(), "cpu", 0)
    values = _values(learner, config)
    observations_changed = _values(learner, config, _shift_observations(slice(None)))
    np.testing.assert_allclose(observations_changed, values, rtol=1e-6, atol=1e-7)
    assert not np.allclose(_values(learner, config, _shift_state), values)
    assert not np.allclose(values[..., 0], values[..., AGENT])
    assert not np.allclose(values[..., 0], values[..., 1])


@pytest.mark.parametrize("backend", MAPPO_BACKENDS, ids=str)
def test_an_agent_specific_critic_values_the_state_and_the_agents_own_observation(
    backend: Backend,
) -> None:
    """With ``agent_specific_state`` the value also depends on the agent's own observation: a
    change to one agent's observation moves that agent's values and no other agent's."""
    config = _config(MAPPOConfig, value_norm=False, agent_specific_state=True)
    learner = entry(Algorithm.MAPPO).learner_class(backend)(config, _tag_info(), "cpu", 0)
    values = _values(learner, config)
    one_agent_changed = _values(learner, config, _shift_observations(AGENT))
    np.testing.assert_allclose(
        one_agent_changed[..., ADVERSARIES], values[..., ADVERSARIES], rtol=1e-6, atol=1e-7
    )
    assert not np.allclose(one_agent_changed[..., AGENT], values[..., AGENT])
    state_changed = _values(learner, config, _shift_state)
    assert not np.allclose(state_changed[..., ADVERSARIES], values[..., ADVERSARIES])


PPO_PAIRS = [(a, b) for a, b in built_pairs() if a in (Algorithm.MAPPO, Algorithm.IPPO)]


@pytest.mark.parametrize(("algorithm", "backend"), PPO_PAIRS, ids=lambda p: str(p))
def test_parameters_are_shared_within_a_team_never_across(
    algorithm: Algorithm, backend: Backend
) -> None:
    """Each team has its own actor and critic ((T, ...) tensors, adversaries first): an update on
    a rollout in which the lone agent never lived moves the adversaries' weights and leaves the
    agent's exactly where they were (one shared network would have moved for both)."""
    cls = MAPPOConfig if algorithm == Algorithm.MAPPO else IPPOConfig
    config = _config(cls)
    learner = entry(algorithm).learner_class(backend)(config, _tag_info(), "cpu", 0)
    before = learner.state()
    assert before["actor.layers.0.weight"].shape[0] == 2  # one per team
    # The first layer reads the observation and a one-hot of the place in the team (3 wide).
    assert before["actor.layers.0.weight"].shape[-1] == _tag_info().obs_dim + 3
    buffer = _rollout(config)
    buffer.agent_mask[..., AGENT] = 0.0
    learner.update(buffer)
    after = learner.state()
    for net in ("actor", "critic"):
        for name in (f"{net}.layers.0.weight", f"{net}.layers.1.bias", f"{net}.head.weight"):
            np.testing.assert_array_equal(after[name][1], before[name][1], err_msg=name)
            assert not np.allclose(after[name][0], before[name][0]), name
