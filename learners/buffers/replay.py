"""A uniform replay buffer over preallocated NumPy arrays, one row per env copy per step.

Rows keep the agent axis, so one buffer serves DDPG (one agent), MADDPG and WQMIX. ``next_obs`` is
the env's ``final_obs``: for a copy whose episode ended it is the episode's last observation (not
the first of the next episode, which the env already shows in ``obs``), so a truncated transition
bootstraps from the right state. ``terminated`` alone stops the bootstrap.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, Observation, Transition

Array = NDArray[Any]


@dataclass
class ReplayBatch:
    """A batch of B transitions; shapes are (B, N, ...) with N agents."""

    obs: Array
    """(B, N, obs_dim)"""
    state: Array
    """(B, state_dim), or (B, 0) when the buffer stores no state."""
    actions: Array
    """(B, N, action_dim) float32 in [-1, 1] (continuous) or (B, N) int64 (discrete)."""
    rewards: Array
    """(B, N)"""
    next_obs: Array
    """(B, N, obs_dim): the observation the transition ended on (``final_obs``)."""
    next_state: Array
    """(B, state_dim) or (B, 0)."""
    terminated: Array
    """(B,) 1.0 where the episode truly ended (no bootstrap), else 0.0 (time limits bootstrap)."""
    agent_mask: Array
    """(B, N)"""
    avail_actions: Array
    """(B, N, action_dim) for discrete actions, (B, N, 0) for continuous ones."""
    next_avail_actions: Array
    """(B, N, action_dim) or (B, N, 0)."""


def _row_shapes(info: EnvInfo, with_state: bool) -> dict[str, tuple[tuple[int, ...], type]]:
    n, d = info.num_agents, info.obs_dim
    discrete = info.action_kind == "discrete"
    s = info.state_dim if with_state else 0
    a = info.action_dim if discrete else 0
    return {
        "obs": ((n, d), np.float32),
        "state": ((s,), np.float32),
        "actions": (((n,), np.int64) if discrete else ((n, info.action_dim), np.float32)),
        "rewards": ((n,), np.float32),
        "next_obs": ((n, d), np.float32),
        "next_state": ((s,), np.float32),
        "terminated": ((), np.float32),
        "agent_mask": ((n,), np.float32),
        "avail_actions": ((n, a), np.float32),
        "next_avail_actions": ((n, a), np.float32),
    }


class ReplayBuffer:
    """``capacity`` transitions, the oldest overwritten first; sampling is uniform."""

    def __init__(self, info: EnvInfo, capacity: int, *, with_state: bool = False) -> None:
        self.capacity = capacity
        self._shapes = _row_shapes(info, with_state)
        self._data: dict[str, Array] = {
            name: np.zeros((capacity, *shape), dtype)
            for name, (shape, dtype) in self._shapes.items()
        }
        self.position = 0
        self.size = 0
        self._rows = np.arange(info.num_envs)
        self._index = np.zeros(info.num_envs, np.int64)
        self._batches: dict[int, ReplayBatch] = {}

    def add(self, obs: Observation, actions: Array, transition: Transition) -> None:
        """Store one batched step: row ``e`` is copy ``e``'s transition."""
        np.add(self._rows, self.position, out=self._index)
        np.remainder(self._index, self.capacity, out=self._index)
        idx, d = self._index, self._data
        d["obs"][idx] = obs.obs
        d["actions"][idx] = actions
        d["rewards"][idx] = transition.rewards
        d["next_obs"][idx] = transition.final_obs
        d["terminated"][idx] = transition.terminated
        d["agent_mask"][idx] = obs.agent_mask
        d["avail_actions"][idx] = obs.avail_actions
        d["next_avail_actions"][idx] = transition.final_avail_actions
        if d["state"].shape[1]:
            d["state"][idx] = obs.state
            d["next_state"][idx] = transition.final_state
        self.position = int((self.position + len(idx)) % self.capacity)
        self.size = min(self.size + len(idx), self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplayBatch:
        """``batch_size`` transitions drawn uniformly with replacement. The batch's arrays are
        reused by the next ``sample`` of the same size."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        index = rng.integers(0, self.size, batch_size)
        batch = self._batches.get(batch_size)
        if batch is None:
            batch = ReplayBatch(
                **{
                    name: np.zeros((batch_size, *shape), dtype)
                    for name, (shape, dtype) in self._shapes.items()
                }
            )
            self._batches[batch_size] = batch
        for field in fields(ReplayBatch):
            np.take(self._data[field.name], index, axis=0, out=getattr(batch, field.name))
        return batch

    def state(self) -> dict[str, Array]:
        """The stored rows and the write position, as checkpoint tensors ``replay/...``."""
        tensors = {f"replay/{name}": array[: self.size] for name, array in self._data.items()}
        tensors["replay/position"] = np.array(self.position, np.int64)
        return tensors

    def load_state(self, tensors: dict[str, Array]) -> None:
        """Restore what ``state`` returned."""
        size = int(tensors["replay/obs"].shape[0])
        if size > self.capacity:
            raise ValueError(
                f"the checkpoint holds {size} transitions; capacity is {self.capacity}"
            )
        for name, array in self._data.items():
            stored = tensors[f"replay/{name}"]
            if stored.shape[1:] != array.shape[1:]:
                raise ValueError(
                    f"replay/{name} has shape {stored.shape[1:]} per row, not {array.shape[1:]}"
                )
            array[:size] = stored
        self.size = size
        self.position = int(tensors["replay/position"])
