"""The preallocated arrays and episode bookkeeping that every batched env adapter shares.

An adapter steps its copies one by one and writes each copy's row into these arrays; what is the
same for every suite (double buffering, returns and lengths, copying the final observation of the
copies that did not end) lives here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, FloatArray, Observation, Transition
from learners.envs.vector.arrays import NUMPY, ArrayOps


def padded_obs_mask(info: EnvInfo) -> FloatArray:
    """(E, N, obs_dim): 1 over each agent's real features, 0 over its padding."""
    mask = np.zeros((info.num_envs, info.num_agents, info.obs_dim), np.float32)
    for j, dim in enumerate(info.obs_dims):
        mask[:, j, :dim] = 1.0
    return mask


class StepBuffers:
    """Two sets of ``Observation``/``Transition`` arrays used in turn, so what a step returned stays
    valid while the next step runs (a runner stores ``obs`` and ``next_obs`` of one transition
    together). The observation mask never changes and is shared by both sets; ``agent_mask`` and
    ``avail_actions`` start as all ones (no agent leaves, every action is available) and are
    double-buffered too, so an adapter whose agents leave early or whose available actions change
    writes each step's into the set it is filling, and ``final_avail_actions`` of the copies that
    did not end follows the next observation's like ``final_obs``.

    ``xp`` places what is observed (``obs``, ``state`` and their ``final_*``): NumPy arrays by
    default, torch tensors on a device for an env that keeps its observations there
    (``learners.envs.vector.adapter.VectorVecEnv`` with a ``device``); rewards, flags, masks and
    episode figures stay on the host either way."""

    def __init__(self, info: EnvInfo, xp: ArrayOps = NUMPY) -> None:
        e, n, d = info.num_envs, info.num_agents, info.obs_dim
        avail_dim = info.action_dim if info.action_kind == "discrete" else 0
        self.xp = xp
        self.obs_mask = padded_obs_mask(info)
        self._obs = [self._new_observation(e, n, d, info.state_dim, avail_dim) for _ in range(2)]
        self._transitions = [
            Transition(
                rewards=np.zeros((e, n), np.float32),
                terminated=np.zeros(e, np.bool_),
                truncated=np.zeros(e, np.bool_),
                final_obs=xp.zeros((e, n, d), xp.float32),
                final_state=xp.zeros((e, info.state_dim), xp.float32),
                final_avail_actions=np.ones((e, n, avail_dim), np.float32),
                episode_returns=np.full(e, np.nan, np.float32),
                episode_lengths=np.zeros(e, np.int64),
                agent_returns=np.full((e, n), np.nan, np.float32),
            )
            for _ in range(2)
        ]
        self._slot = 0
        self._returns = np.zeros((e, n), np.float64)
        self._lengths = np.zeros(e, np.int64)
        self._ended = np.zeros(e, np.bool_)
        self._continuing = np.zeros(e, np.bool_)

    def _new_observation(
        self, e: int, n: int, d: int, state_dim: int, avail_dim: int
    ) -> Observation:
        return Observation(
            obs=self.xp.zeros((e, n, d), self.xp.float32),
            obs_mask=self.obs_mask,
            state=self.xp.zeros((e, state_dim), self.xp.float32),
            agent_mask=np.ones((e, n), np.float32),
            avail_actions=np.ones((e, n, avail_dim), np.float32),
        )

    def fill_masks(self, agent_mask: FloatArray, avail_actions: FloatArray) -> None:
        """Start both sets' ``agent_mask`` and ``avail_actions`` (and the transitions'
        ``final_avail_actions``) from these: an adapter whose agents differ in action size marks
        each agent's padded actions unavailable once, here."""
        for obs in self._obs:
            obs.agent_mask[...] = agent_mask
            obs.avail_actions[...] = avail_actions
        for transition in self._transitions:
            transition.final_avail_actions[...] = avail_actions

    def start_reset(self) -> Observation:
        """The arrays to write a reset into; forgets the episodes in progress."""
        self._returns.fill(0.0)
        self._lengths.fill(0)
        self._slot ^= 1
        return self._obs[self._slot]

    def start_step(self) -> tuple[Observation, Transition]:
        """The arrays to write the next step into, with the per-step flags cleared."""
        self._slot ^= 1
        transition = self._transitions[self._slot]
        transition.terminated.fill(False)
        transition.truncated.fill(False)
        transition.episode_returns.fill(np.nan)
        transition.episode_lengths.fill(0)
        transition.agent_returns.fill(np.nan)
        return self._obs[self._slot], transition

    @staticmethod
    def end_episode(transition: Transition, i: int, terminated: bool) -> None:
        """Mark copy ``i``'s episode as ended this step (a true end or a time limit)."""
        transition.terminated[i] = terminated
        transition.truncated[i] = not terminated

    def finish_step(self, obs: Observation, transition: Transition) -> None:
        """Account this step's rewards and fill ``final_*`` for the copies that did not end.

        Call after every copy's row (rewards, flags, final_* of ended copies, next obs) is written.
        """
        self._returns += transition.rewards
        self._lengths += 1
        np.logical_or(transition.terminated, transition.truncated, out=self._ended)
        for i in np.flatnonzero(self._ended):
            transition.episode_returns[i] = self._returns[i].mean()
            transition.agent_returns[i] = self._returns[i]
            transition.episode_lengths[i] = self._lengths[i]
            self._returns[i] = 0.0
            self._lengths[i] = 0
        np.logical_not(self._ended, out=self._continuing)
        self.xp.copy_where(transition.final_obs, obs.obs, self._continuing[:, None, None])
        self.xp.copy_where(transition.final_state, obs.state, self._continuing[:, None])
        np.copyto(
            transition.final_avail_actions, obs.avail_actions, where=self._continuing[:, None, None]
        )


def as_index_array(episode_index: NDArray[np.int64] | None, num_envs: int) -> NDArray[np.int64]:
    """A fresh (E,) int64 copy of ``episode_index``, zeros when it is ``None``."""
    if episode_index is None:
        return np.zeros(num_envs, np.int64)
    index = np.array(episode_index, dtype=np.int64).reshape(-1)
    if index.shape != (num_envs,) or (index < 0).any():
        raise ValueError(f"episode_index must be {num_envs} non-negative integers, got {index}")
    return index


def first_frame(envs: Sequence[Any]) -> NDArray[np.uint8]:
    """Copy 0's RGB frame, (H, W, 3): what every in-process adapter's ``render`` returns."""
    frame = envs[0].render()
    if not isinstance(frame, np.ndarray):
        raise RuntimeError("render() needs an env made with render=True")
    return frame.astype(np.uint8, copy=False)


def close_all(envs: Sequence[Any]) -> None:
    """Close every copy."""
    for env in envs:
        env.close()
