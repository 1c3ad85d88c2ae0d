"""Any PettingZoo ``ParallelEnv`` as a batched ``VecEnv``: the adapter every suite built on the
PettingZoo API shares (mpe2's newer scenarios, SISL, multi-agent MuJoCo, operator plugins).

What it does beyond stepping copies in a loop:

- **Agents of different spaces** (groups): observations are flattened and padded to the largest,
  with ``obs_mask`` marking the real features; discrete actions are padded to the largest action
  count with the padded actions unavailable in ``avail_actions``, so every learner's masked
  softmax or argmax never picks them; continuous actions are padded to the largest size and an
  agent gets only its own first dimensions, mapped from [-1, 1] onto its own bounds.
- **Agents that leave early**: an agent no longer in ``env.agents`` is absent (``agent_mask``
  0, reward 0; its observation is the last one it got, then zero) until the episode ends,
  which it does when ``env.agents`` is empty. The end is a time limit (``truncated``) if any
  agent was truncated on the last step, a true end otherwise.
- **Dict observations** with an ``observation`` entry (PettingZoo's convention beside an
  ``action_mask``) use that entry; an ``action_mask`` there, or in an agent's ``info``, narrows
  its available discrete actions for that step.
- **The global state** is ``env.state()`` where the env declares a ``state_space`` (and the suite
  does not turn it off), else every agent's padded observation side by side.
- **A time limit** of its own, ``max_episode_steps``, truncates an episode the env would let run
  on (every episode buffer is padded to a known length).
- **Non-finite values**: an observation or reward that is NaN or infinite raises ``ValueError``
  naming the env, the copy and the step, so a run fails at the step it went wrong rather than
  training on it.

Episode ``k`` of copy ``i`` is seeded from ``(seed, i, k)`` like every adapter's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, Observation, Transition, episode_seed
from learners.envs.batch import StepBuffers, as_index_array, close_all, first_frame
from learners.envs.teams import teams_of

ParallelEnvMaker = Callable[[bool], Any]
"""Builds one PettingZoo parallel env; the argument asks for ``rgb_array`` rendering. Must be
picklable (a ``functools.partial`` of a module-level function) so copies can step in worker
processes."""


@dataclass(frozen=True)
class _AgentSpace:
    obs_dim: int
    discrete: bool
    action_dim: int
    low: NDArray[np.float32] | None
    high: NDArray[np.float32] | None


def _obs_space(space: Any) -> Any:
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, Mapping) and "observation" in spaces:
        return spaces["observation"]
    return space


def _agent_space(name: str, env: Any, agent: str) -> _AgentSpace:
    obs_space = _obs_space(env.observation_space(agent))
    shape = getattr(obs_space, "shape", None)
    if not shape:
        raise ValueError(f"{name}: agent {agent}'s observations are not an array ({obs_space})")
    action = env.action_space(agent)
    if hasattr(action, "n"):
        return _AgentSpace(int(np.prod(shape)), True, int(action.n), None, None)
    if getattr(action, "shape", None) is None or len(action.shape) != 1:
        raise ValueError(f"{name}: agent {agent}'s actions are neither Discrete nor a flat Box")
    low, high = np.asarray(action.low, np.float32), np.asarray(action.high, np.float32)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(f"{name}: agent {agent}'s action bounds must be finite")
    return _AgentSpace(int(np.prod(shape)), False, int(action.shape[0]), low, high)


def _declares_state(env: Any) -> bool:
    return getattr(env, "state_space", None) is not None


def _padded_bounds(spaces: Sequence[_AgentSpace], dim: int) -> tuple[NDArray[np.float32], ...]:
    """Per dimension, the bounds of the first agent that has it (what ``EnvInfo`` reports)."""
    low, high = np.full(dim, -1.0, np.float32), np.full(dim, 1.0, np.float32)
    for space in reversed(spaces):
        assert space.low is not None and space.high is not None
        low[: space.action_dim], high[: space.action_dim] = space.low, space.high
    return low, high


def parallel_env_info(
    name: str,
    env: Any,
    num_envs: int,
    *,
    teams: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    max_episode_steps: int | None = None,
    use_env_state: bool = True,
) -> EnvInfo:
    """The ``EnvInfo`` of ``num_envs`` copies of the parallel env ``env`` (built, not reset);
    ``use_env_state`` false ignores the env's own ``state()`` (multiwalker's fails once a walker
    has fallen) for the agents' observations side by side."""
    agents = tuple(env.possible_agents)
    spaces = [_agent_space(name, env, a) for a in agents]
    kinds = {s.discrete for s in spaces}
    if len(kinds) != 1:
        raise ValueError(f"{name}: some agents act with discrete actions and some with continuous")
    discrete = kinds.pop()
    action_dim = max(s.action_dim for s in spaces)
    obs_dims = tuple(s.obs_dim for s in spaces)
    state_dim = len(agents) * max(obs_dims)
    if use_env_state and _declares_state(env):
        state_dim = int(np.prod(env.state_space.shape))
    bounds = (None, None) if discrete else _padded_bounds(spaces, action_dim)
    return EnvInfo(
        num_envs=num_envs,
        num_agents=len(agents),
        agent_ids=agents,
        teams=tuple(teams) if teams is not None else teams_of(agents),
        obs_dim=max(obs_dims),
        obs_dims=obs_dims,
        state_dim=state_dim,
        action_kind="discrete" if discrete else "continuous",
        action_dim=action_dim,
        action_low=bounds[0],
        action_high=bounds[1],
        max_episode_steps=max_episode_steps,
        groups=tuple(groups) if groups is not None else teams_of(agents),
        action_dims=tuple(s.action_dim for s in spaces),
    )


class ParallelVecEnv:
    """``num_envs`` copies of one PettingZoo parallel env built by ``make_env``; copy ``i`` of this
    object is copy ``first_copy + i`` of the run (the index its episode seeds use)."""

    def __init__(
        self,
        make_env: ParallelEnvMaker,
        num_envs: int,
        seed: int,
        *,
        first_copy: int = 0,
        render: bool = False,
        name: str = "env",
        teams: Sequence[str] | None = None,
        groups: Sequence[str] | None = None,
        max_episode_steps: int | None = None,
        use_env_state: bool = True,
    ) -> None:
        self._name = name
        self._envs = [make_env(render and i == 0) for i in range(num_envs)]
        self.info = parallel_env_info(
            name,
            self._envs[0],
            num_envs,
            teams=teams,
            groups=groups,
            max_episode_steps=max_episode_steps,
            use_env_state=use_env_state,
        )
        self._agents = self.info.agent_ids
        self._spaces = [_agent_space(name, self._envs[0], a) for a in self._agents]
        self._discrete = self.info.action_kind == "discrete"
        self._has_state = use_env_state and _declares_state(self._envs[0])
        self._seed = seed
        self._first_copy = first_copy
        self._buffers = StepBuffers(self.info)
        self._base_avail = np.zeros((num_envs, self.info.num_agents, 0), np.float32)
        if self._discrete:
            self._base_avail = np.zeros(
                (num_envs, self.info.num_agents, self.info.action_dim), np.float32
            )
            for j, space in enumerate(self._spaces):
                self._base_avail[:, j, : space.action_dim] = 1.0
        self._buffers.fill_masks(
            np.ones((num_envs, self.info.num_agents), np.float32), self._base_avail
        )
        self._steps = np.zeros(num_envs, np.int64)
        self.episode_index = np.zeros(num_envs, np.int64)
        self.step_observer: Callable[[int, Any], None] | None = None
        """Called with ``i`` and copy ``i``'s env right after that copy stepped, before an ended
        episode is reset (``learners.matches`` scores mpe2 matches from it)."""

    # -- writing one copy's row ------------------------------------------------------------

    def _check_finite(self, i: int, what: str, values: NDArray[Any]) -> None:
        if not np.isfinite(values).all():
            step = int(self._steps[i])
            raise ValueError(
                f"{self._name} returned a non-finite {what} in env copy {self._first_copy + i} "
                f"at step {step} of episode {int(self.episode_index[i])}"
            )

    def _write_obs(
        self, i: int, observations: Mapping[str, Any], infos: Mapping[str, Any], out: Observation
    ) -> NDArray[np.float32]:
        """Copy ``i``'s observations into ``out`` (obs, masks, state); returns its obs row."""
        row: NDArray[np.float32] = out.obs[i]
        row.fill(0.0)
        out.agent_mask[i] = 0.0
        if self._discrete:
            out.avail_actions[i] = self._base_avail[i]
        live = set(self._envs[i].agents)
        for j, (agent, dim) in enumerate(zip(self._agents, self.info.obs_dims, strict=True)):
            if agent not in observations:
                continue
            value = observations[agent]
            mask = None
            if isinstance(value, Mapping):
                mask = value.get("action_mask")
                value = value["observation"]
            row[j, :dim] = np.asarray(value, np.float32).reshape(-1)
            # Its last observation is kept, but an agent that left acts no more.
            out.agent_mask[i, j] = float(agent in live or not live)
            info = infos.get(agent)
            if mask is None and isinstance(info, Mapping):
                mask = info.get("action_mask")
            if mask is not None and self._discrete:
                size = self._spaces[j].action_dim
                out.avail_actions[i, j, :size] = np.asarray(mask, np.float32).reshape(-1)[:size]
        self._check_finite(i, "observation", row)
        if self._has_state:
            state = np.asarray(self._envs[i].state(), np.float32).reshape(-1)
            self._check_finite(i, "state", state)
            out.state[i] = state
        else:
            out.state[i] = row.reshape(-1)
        return row

    def _reset_copy(self, i: int, out: Observation) -> None:
        copy_seed = episode_seed(self._seed, self._first_copy + i, int(self.episode_index[i]))
        observations, infos = self._envs[i].reset(seed=copy_seed)
        self._steps[i] = 0
        self._write_obs(i, observations, infos or {}, out)

    def reset(
        self, seed: int | None = None, episode_index: NDArray[np.int64] | None = None
    ) -> Observation:
        if seed is not None:
            self._seed = seed
        self.episode_index = as_index_array(episode_index, self.info.num_envs)
        obs = self._buffers.start_reset()
        for i in range(self.info.num_envs):
            self._reset_copy(i, obs)
        return obs

    # -- stepping --------------------------------------------------------------------------

    def _action_dict(self, env: Any, actions: NDArray[np.generic]) -> dict[str, Any]:
        """One copy's actions ``(N, ...)`` for the agents still in its episode."""
        live = set(env.agents)
        out: dict[str, Any] = {}
        for j, (agent, space) in enumerate(zip(self._agents, self._spaces, strict=True)):
            if agent not in live:
                continue
            if space.discrete:
                out[agent] = min(int(actions[j]), space.action_dim - 1)
                continue
            assert space.low is not None and space.high is not None
            unit = np.clip(np.asarray(actions[j], np.float32)[: space.action_dim], -1.0, 1.0)
            half_range = 0.5 * (space.high - space.low)
            out[agent] = unit * half_range + (space.low + half_range)
        return out

    def step(self, actions: NDArray[np.generic]) -> tuple[Observation, Transition]:
        obs, transition = self._buffers.start_step()
        limit = self.info.max_episode_steps
        for i, env in enumerate(self._envs):
            observations, rewards, terminations, truncations, infos = env.step(
                self._action_dict(env, actions[i])
            )
            self._steps[i] += 1
            if self.step_observer is not None:
                self.step_observer(i, env)
            for j, agent in enumerate(self._agents):
                transition.rewards[i, j] = float(rewards.get(agent, 0.0))
            self._check_finite(i, "reward", transition.rewards[i])
            timed_out = limit is not None and self._steps[i] >= limit
            if env.agents and not timed_out:
                self._write_obs(i, observations, infos or {}, obs)
                continue
            # The episode is over: keep its last observation, then start the next one.
            truncated = timed_out or any(truncations.values())
            StepBuffers.end_episode(transition, i, not truncated)
            final = self._write_obs(i, observations, infos or {}, obs)
            transition.final_obs[i] = final
            transition.final_state[i] = obs.state[i]
            transition.final_avail_actions[i] = obs.avail_actions[i]
            self.episode_index[i] += 1
            self._reset_copy(i, obs)
        self._buffers.finish_step(obs, transition)
        return obs, transition

    def render(self) -> NDArray[np.uint8]:
        return first_frame(self._envs)

    def close(self) -> None:
        close_all(self._envs)
