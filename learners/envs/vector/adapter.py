"""``VectorVecEnv``: the vector engine behind the learners' ``VecEnv`` interface (``env.engine:
vector``), a drop-in for ``learners.envs.mpe.MPEVecEnv``.

It gives what ``MPEVecEnv`` gives, to 1e-5 (tests/learners/envs/test_vector_adapter.py drives both
with the same seed and actions): the same ``EnvInfo``, the learners' [-1, 1] continuous actions
mapped onto mpe2's ``Box(0, 1)`` by the same float32 arithmetic, ended copies reset automatically
with the episode's last observation kept in ``final_obs``, and the same episode seeds: episode ``k``
of copy ``i`` starts from ``episode_seed(seed, i, k)`` drawn as mpe2 draws it, so both engines play
the same episodes. Everything is array code except the reset draws (one small generator per
resetting copy, as mpe2 makes one per seeded reset).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, Observation, Transition, episode_seed
from learners.envs.batch import StepBuffers, as_index_array
from learners.envs.teams import teams_of
from learners.envs.vector.engine import VectorMPE


def engine_info(engine: VectorMPE) -> EnvInfo:
    """The ``EnvInfo`` ``MPEVecEnv`` reads off mpe2 for the same scenario and kwargs."""
    continuous = engine.continuous
    return EnvInfo(
        num_envs=engine.num_envs,
        num_agents=engine.num_agents,
        agent_ids=engine.agent_ids,
        teams=teams_of(engine.agent_ids),
        obs_dim=engine.obs_dim,
        obs_dims=engine.obs_dims,
        state_dim=engine.state_dim,
        action_kind="continuous" if continuous else "discrete",
        action_dim=engine.action_dim,
        action_low=np.zeros(engine.action_dim, np.float32) if continuous else None,
        action_high=np.ones(engine.action_dim, np.float32) if continuous else None,
        max_episode_steps=engine.max_cycles,
    )


class VectorVecEnv:
    """``num_envs`` copies of one MPE scenario on the vector engine; copy ``i`` of this object is
    copy ``first_copy + i`` of the run (the index its episode seeds use). ``render`` is refused:
    replays render on mpe2 (``make_vec_env`` sends them there)."""

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
        if render:
            raise ValueError("the vector engine does not render; replays render on mpe2")
        self._engine = VectorMPE(env_id, kwargs, num_envs, seed)
        self.info = engine_info(self._engine)
        self._continuous = self.info.action_kind == "continuous"
        # MPEVecEnv's map of [-1, 1] onto Box(0, 1): the same float32 operations, so the engine
        # differences the same numbers mpe2 does.
        if self._continuous:
            assert self.info.action_low is not None and self.info.action_high is not None
            self._half_range = 0.5 * (self.info.action_high - self.info.action_low)
            self._offset = self.info.action_low + self._half_range
        self._action = np.zeros((num_envs, self.info.num_agents, self.info.action_dim), np.float32)
        self._seed = seed
        self._first_copy = first_copy
        self._buffers = StepBuffers(self.info)
        self.episode_index = np.zeros(num_envs, np.int64)

    def _seeds(self, copies: NDArray[np.int64]) -> list[int]:
        return [
            episode_seed(self._seed, self._first_copy + int(i), int(self.episode_index[i]))
            for i in copies
        ]

    def _write(self, out: Observation, engine_obs: NDArray[np.float32]) -> None:
        np.copyto(out.obs, engine_obs)
        np.copyto(out.state, self._engine.state())

    def reset(
        self, seed: int | None = None, episode_index: NDArray[np.int64] | None = None
    ) -> Observation:
        if seed is not None:
            self._seed = seed
        self.episode_index = as_index_array(episode_index, self.info.num_envs)
        obs = self._buffers.start_reset()
        everyone = np.arange(self.info.num_envs)
        engine_obs = self._engine.reset(seeds=self._seeds(everyone))
        self._write(obs, engine_obs)
        return obs

    def _engine_actions(self, actions: NDArray[np.generic]) -> NDArray[np.generic]:
        if not self._continuous:
            return np.asarray(actions, np.int64)
        np.clip(actions, -1.0, 1.0, out=self._action)
        np.multiply(self._action, self._half_range, out=self._action)
        np.add(self._action, self._offset, out=self._action)
        return self._action

    def step(self, actions: NDArray[np.generic]) -> tuple[Observation, Transition]:
        obs, transition = self._buffers.start_step()
        engine_obs, rewards, terminated, truncated = self._engine.step(
            self._engine_actions(actions)
        )
        transition.rewards[:] = rewards
        np.copyto(transition.terminated, terminated)
        np.copyto(transition.truncated, truncated)
        ended = terminated | truncated
        if ended.any():
            # Keep the ended episodes' last observation, then start their next episodes.
            transition.final_obs[ended] = engine_obs[ended]
            transition.final_state[ended] = self._engine.state()[ended]
            self.episode_index[ended] += 1
            copies = np.flatnonzero(ended)
            engine_obs = self._engine.reset(ended, seeds=self._seeds(copies))
        self._write(obs, engine_obs)
        self._buffers.finish_step(obs, transition)
        return obs, transition

    def render(self) -> NDArray[np.uint8]:
        raise RuntimeError("the vector engine does not render; replays render on mpe2")

    def close(self) -> None:
        """Nothing to release: the engine is arrays."""
