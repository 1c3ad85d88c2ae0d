"""Gymnasium environments as a batched ``VecEnv`` with one agent.

Each copy is a plain ``gymnasium.make`` env (with its registered time limit) stepped in a loop; the
vector wrappers of Gymnasium are not used because their autoreset modes hide either the final
observation or the reset, and we need both, plus our own per-episode seeds. The observation is also
the global state (one agent sees everything there is).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import gymnasium as gym
import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, Observation, Transition, episode_seed
from learners.envs.batch import StepBuffers, as_index_array, close_all, first_frame


@functools.cache
def route_mujoco_warnings() -> None:
    """Send MuJoCo's warnings to Python logging. Left alone, MuJoCo appends them to a
    ``MUJOCO_LOG.TXT`` in the working directory (HalfCheetah's model warns on every load)."""
    import mujoco

    log = logging.getLogger("mujoco")
    mujoco.set_mju_user_warning(lambda message: log.warning("%s", message))


def _check_spaces(env_id: str, env: gym.Env[Any, Any]) -> tuple[int, gym.spaces.Box]:
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(f"{env_id}: only flat Box observations are supported, got {obs_space}")
    if not isinstance(act_space, gym.spaces.Box) or len(act_space.shape) != 1:
        raise ValueError(f"{env_id}: only flat Box actions are supported, got {act_space}")
    if not (np.isfinite(act_space.low).all() and np.isfinite(act_space.high).all()):
        raise ValueError(f"{env_id}: the action bounds must be finite to scale actions onto them")
    return int(obs_space.shape[0]), act_space


class GymnasiumVecEnv:
    """``num_envs`` copies of one Gymnasium env; copy ``i`` of this object is copy
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
        if "mujoco" in str(gym.spec(env_id).entry_point):
            route_mujoco_warnings()
        self._envs = [
            gym.make(env_id, render_mode="rgb_array" if render and i == 0 else None, **kwargs)
            for i in range(num_envs)
        ]
        obs_dim, act_space = _check_spaces(env_id, self._envs[0])
        spec = self._envs[0].spec
        self.info = EnvInfo(
            num_envs=num_envs,
            num_agents=1,
            agent_ids=("agent_0",),
            teams=("agent",),
            obs_dim=obs_dim,
            obs_dims=(obs_dim,),
            state_dim=obs_dim,
            action_kind="continuous",
            action_dim=int(act_space.shape[0]),
            action_low=act_space.low.astype(np.float32),
            action_high=act_space.high.astype(np.float32),
            max_episode_steps=spec.max_episode_steps if spec is not None else None,
        )
        # Actions arrive in [-1, 1]: env_action = offset + half_range * action.
        self._half_range = 0.5 * (act_space.high - act_space.low).astype(np.float64)
        self._offset = act_space.low.astype(np.float64) + self._half_range
        self._action = np.zeros((num_envs, self.info.action_dim), act_space.dtype)
        self._scratch = np.zeros((num_envs, self.info.action_dim), np.float64)
        self._seed = seed
        self._first_copy = first_copy
        self._buffers = StepBuffers(self.info)
        self.episode_index = np.zeros(num_envs, np.int64)

    def _reset_copy(self, i: int, out: Observation) -> None:
        copy_seed = episode_seed(self._seed, self._first_copy + i, int(self.episode_index[i]))
        first, _ = self._envs[i].reset(seed=copy_seed)
        out.obs[i, 0] = first
        out.state[i] = out.obs[i, 0]

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

    def step(self, actions: NDArray[np.generic]) -> tuple[Observation, Transition]:
        env_actions = self._scratch
        np.copyto(env_actions, np.reshape(actions, env_actions.shape))
        np.clip(env_actions, -1.0, 1.0, out=env_actions)
        np.multiply(env_actions, self._half_range, out=env_actions)
        np.add(env_actions, self._offset, out=self._action, casting="unsafe")
        obs, transition = self._buffers.start_step()
        for i, env in enumerate(self._envs):
            next_obs, reward, terminated, truncated, _ = env.step(self._action[i])
            transition.rewards[i, 0] = reward
            if terminated or truncated:
                StepBuffers.end_episode(transition, i, bool(terminated))
                transition.final_obs[i, 0] = next_obs
                transition.final_state[i] = transition.final_obs[i, 0]
                self.episode_index[i] += 1
                self._reset_copy(i, obs)
            else:
                obs.obs[i, 0] = next_obs
                obs.state[i] = obs.obs[i, 0]
        self._buffers.finish_step(obs, transition)
        return obs, transition

    def render(self) -> NDArray[np.uint8]:
        return first_frame(self._envs)

    def close(self) -> None:
        close_all(self._envs)
