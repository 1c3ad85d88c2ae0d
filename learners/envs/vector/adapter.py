"""``VectorVecEnv``: the vector engine behind the learners' ``VecEnv`` interface (``env.engine:
vector``), a drop-in for ``learners.envs.mpe.MPEVecEnv``.

It gives what ``MPEVecEnv`` gives, to 1e-5 (tests/learners/envs/test_vector_adapter.py drives both
with the same seed and actions): the same ``EnvInfo``, the learners' [-1, 1] continuous actions
mapped onto mpe2's ``Box(0, 1)`` by the same float32 arithmetic, ended copies reset automatically
with the episode's last observation kept in ``final_obs``, and the same episode seeds: episode ``k``
of copy ``i`` starts from ``episode_seed(seed, i, k)`` drawn as mpe2 draws it, so both engines play
the same episodes. Everything is array code except the reset draws (one small generator per
resetting copy, as mpe2 makes one per seeded reset).

With a torch ``device`` the engine's world and what the agents observe (``obs``, ``state`` and
their ``final_*``) stay in tensors on that device, so a learner there reads them without a copy:
no observation crosses to the host. Rewards and the episode flags (a few numbers per copy) come to
the host each step, where the episode bookkeeping, the reset seeds and the runners' statistics
are; actions may come as host arrays (the learners sample on the host) or as tensors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, Observation, Transition, episode_seed
from learners.envs.batch import StepBuffers, as_index_array
from learners.envs.teams import teams_of
from learners.envs.vector.arrays import ArrayOps
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
    replays render on mpe2 (``make_vec_env`` sends them there). ``device`` (a torch device) keeps
    the world and the observations there; ``None``, NumPy on the host."""

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any],
        num_envs: int,
        seed: int,
        *,
        first_copy: int = 0,
        render: bool = False,
        device: str | None = None,
    ) -> None:
        if render:
            raise ValueError("the vector engine does not render; replays render on mpe2")
        self._engine = VectorMPE(env_id, kwargs, num_envs, seed, device=device)
        self.observation_ops: ArrayOps = self._engine.xp
        """Where ``obs``, ``state`` and ``final_*`` live (NumPy, or torch on ``device``)."""
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
        self._buffers = StepBuffers(self.info, self.observation_ops)
        self.episode_index = np.zeros(num_envs, np.int64)

    def _seeds(self, copies: NDArray[np.int64]) -> list[int]:
        return [
            episode_seed(self._seed, self._first_copy + int(i), int(self.episode_index[i]))
            for i in copies
        ]

    def _write(self, out: Observation, engine_obs: NDArray[np.float32]) -> None:
        xp = self.observation_ops
        xp.copy_into(out.obs, engine_obs)
        xp.copy_into(out.state, self._engine.state())

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
        xp = self.observation_ops
        transition.rewards[:] = xp.to_numpy(rewards)
        np.copyto(transition.terminated, xp.to_numpy(terminated))
        np.copyto(transition.truncated, xp.to_numpy(truncated))
        ended = transition.terminated | transition.truncated
        if ended.any():
            # Keep the ended episodes' last observation, then start their next episodes.
            copies = np.flatnonzero(ended)
            rows = xp.asarray(copies)
            transition.final_obs[rows] = engine_obs[rows]
            transition.final_state[rows] = self._engine.state()[rows]
            self.episode_index[ended] += 1
            engine_obs = self._engine.reset(ended, seeds=self._seeds(copies))
        self._write(obs, engine_obs)
        self._buffers.finish_step(obs, transition)
        return obs, transition

    def render(self) -> NDArray[np.uint8]:
        raise RuntimeError("the vector engine does not render; replays render on mpe2")

    def close(self) -> None:
        """Nothing to release: the engine is arrays."""
