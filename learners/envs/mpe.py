"""MPE (``mpe2``, PettingZoo parallel API) as a batched ``VecEnv``.

Agents keep their PettingZoo order (``possible_agents``). Observations of unequal size are padded
to the largest with ``obs_mask`` marking the real features; the global state is ``env.state()``.
MPE agents live for the whole episode, so ``agent_mask`` is all ones; discrete actions are always
all available. An episode ends for every agent at once: by ``max_cycles`` (truncation) or by the
scenario's own end (``terminate_on_success``: termination).

Continuous MPE actions are ``Box(0, 1)``; the [-1, 1] actions the learners give are mapped onto it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, Observation, Transition, episode_seed
from learners.envs.batch import StepBuffers, as_index_array, close_all, first_frame
from learners.envs.teams import teams_of

# pygame (imported by mpe2) prints a banner on import unless told not to.
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")


def parallel_env(env_id: str, kwargs: dict[str, Any], render: bool = False) -> Any:
    """One mpe2 parallel env; ``env_id`` must come from the catalogue (it names a module)."""
    module = importlib.import_module(f"mpe2.{env_id}")
    return module.parallel_env(render_mode="rgb_array" if render else None, **kwargs)


def _env_info(env: Any, num_envs: int) -> EnvInfo:
    agents = tuple(env.possible_agents)
    obs_dims = tuple(int(env.observation_space(a).shape[0]) for a in agents)
    spaces = [env.action_space(a) for a in agents]
    continuous = hasattr(spaces[0], "low")
    sizes = {int(s.shape[0]) if continuous else int(s.n) for s in spaces}
    if len(sizes) != 1:
        raise ValueError(f"agents of {type(env).__name__} have different action sizes: {sizes}")
    return EnvInfo(
        num_envs=num_envs,
        num_agents=len(agents),
        agent_ids=agents,
        teams=teams_of(agents),
        obs_dim=max(obs_dims),
        obs_dims=obs_dims,
        state_dim=int(env.state_space.shape[0]),
        action_kind="continuous" if continuous else "discrete",
        action_dim=sizes.pop(),
        action_low=spaces[0].low.astype(np.float32) if continuous else None,
        action_high=spaces[0].high.astype(np.float32) if continuous else None,
        max_episode_steps=int(env.unwrapped.max_cycles),
    )


def scenario_info(env_id: str, kwargs: dict[str, Any]) -> EnvInfo:
    """The ``EnvInfo`` of one copy of ``env_id`` with ``kwargs``, read from a throwaway env: mpe2
    sizes observations per scenario (padding, communication), so reading beats recomputing."""
    env = parallel_env(env_id, kwargs)
    try:
        return _env_info(env, 1)
    finally:
        env.close()


class MPEVecEnv:
    """``num_envs`` copies of one MPE scenario; copy ``i`` of this object is copy
    ``first_copy + i`` of the run (the index its episode seeds use)."""

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any],
        num_envs: int,
        seed: int,
        *,
        first_copy: int = 0,
        render: bool = False,
    ) -> None:
        self._envs = [parallel_env(env_id, kwargs, render and i == 0) for i in range(num_envs)]
        self.info = _env_info(self._envs[0], num_envs)
        self._agents = self.info.agent_ids
        self._continuous = self.info.action_kind == "continuous"
        if self._continuous:
            assert self.info.action_low is not None and self.info.action_high is not None
            self._half_range = 0.5 * (self.info.action_high - self.info.action_low)
            self._offset = self.info.action_low + self._half_range
            self._action = np.zeros(
                (num_envs, self.info.num_agents, self.info.action_dim), np.float32
            )
        # One action dict per copy, refilled each step; its values are views or Python ints.
        self._action_dicts: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self._seed = seed
        self._first_copy = first_copy
        self._buffers = StepBuffers(self.info)
        self.episode_index = np.zeros(num_envs, np.int64)
        self.step_observer: Callable[[int, Any], None] | None = None
        """Called with ``i`` and copy ``i``'s mpe2 env right after that copy stepped, before an
        ended episode is reset: where a caller reads the world state that the step's rewards were
        computed from (``learners.matches`` scores a match so)."""

    def _write_obs(self, i: int, observations: dict[str, Any], out: NDArray[np.float32]) -> None:
        for j, (agent, dim) in enumerate(zip(self._agents, self.info.obs_dims, strict=True)):
            out[i, j, :dim] = observations[agent]

    def _reset_copy(self, i: int, out: Observation) -> None:
        copy_seed = episode_seed(self._seed, self._first_copy + i, int(self.episode_index[i]))
        observations, _ = self._envs[i].reset(seed=copy_seed)
        self._write_obs(i, observations, out.obs)
        out.state[i] = self._envs[i].state()

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

    def _fill_action_dicts(self, actions: NDArray[np.generic]) -> None:
        if self._continuous:
            np.clip(actions, -1.0, 1.0, out=self._action)
            np.multiply(self._action, self._half_range, out=self._action)
            np.add(self._action, self._offset, out=self._action)
            for i, acts in enumerate(self._action_dicts):
                for j, agent in enumerate(self._agents):
                    acts[agent] = self._action[i, j]
        else:
            for i, acts in enumerate(self._action_dicts):
                for j, agent in enumerate(self._agents):
                    acts[agent] = int(actions[i, j])

    def step(self, actions: NDArray[np.generic]) -> tuple[Observation, Transition]:
        self._fill_action_dicts(actions)
        obs, transition = self._buffers.start_step()
        for i, env in enumerate(self._envs):
            observations, rewards, terminations, _, _ = env.step(self._action_dicts[i])
            if self.step_observer is not None:
                self.step_observer(i, env)
            for j, agent in enumerate(self._agents):
                transition.rewards[i, j] = rewards[agent]
            if env.agents:
                self._write_obs(i, observations, obs.obs)
                obs.state[i] = env.state()
                continue
            # Every agent is done: keep the episode's last observation, then start the next one.
            StepBuffers.end_episode(transition, i, any(terminations.values()))
            self._write_obs(i, observations, transition.final_obs)
            transition.final_state[i] = env.state()
            self.episode_index[i] += 1
            self._reset_copy(i, obs)
        self._buffers.finish_step(obs, transition)
        return obs, transition

    def render(self) -> NDArray[np.uint8]:
        return first_frame(self._envs)

    def close(self) -> None:
        close_all(self._envs)
