"""A replay buffer of whole episodes, for learners with recurrent agents (WQMIX with a GRU).

A recurrent agent's utility at step t depends on every observation of its episode up to t, so the
learner trains on whole episodes unrolled from a zero hidden state, not on single transitions.
The buffer holds ``capacity`` episodes in preallocated NumPy arrays, each padded to T, the env's
episode limit (``EnvInfo.max_episode_steps``):

- per step t < T: ``actions``, ``rewards``, ``agent_mask`` ``(T, N)``, ``terminated`` and
  ``filled`` ``(T,)`` (1 on the episode's real steps, 0 on the padding);
- per index t <= T: ``obs``, ``state``, ``avail_actions`` ``(T+1, ...)``. An episode of length L
  stores its steps' observations at 0..L-1 and the observation it ended on (the env's
  ``final_obs``) at L, which is what a truncated episode bootstraps from; ``terminated`` is 1 only
  at a true end, so a time limit bootstraps and a termination does not.

Padding is zeros. Each env copy's current episode is staged step by step and committed to the
ring when it ends (terminated or truncated). Sampling draws distinct stored episodes uniformly.
Checkpoints hold the committed episodes only: a run resumes at episode boundaries, where nothing is
staged (mid-episode, the interrupted episodes start over, as the env copies do).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, Observation, Transition

Array = NDArray[Any]


@dataclass
class EpisodeBatch:
    """B episodes padded to T steps, batch first. N agents."""

    obs: Array
    """(B, T+1, N, obs_dim): index t < L is step t's observation, index L (the episode's length)
    the observation it ended on; zeros after."""
    state: Array
    """(B, T+1, state_dim), likewise."""
    avail_actions: Array
    """(B, T+1, N, action_dim) for discrete actions, (B, T+1, N, 0) for continuous ones."""
    actions: Array
    """(B, T, N) int64 (discrete) or (B, T, N, action_dim) float32 in [-1, 1] (continuous)."""
    rewards: Array
    """(B, T, N)"""
    agent_mask: Array
    """(B, T, N): 1 where the agent was alive at that step."""
    terminated: Array
    """(B, T): 1.0 at the step where the episode truly ended (no bootstrap), else 0.0."""
    filled: Array
    """(B, T): 1.0 on the episode's real steps, 0.0 on the padding."""


def _shapes(info: EnvInfo, length: int) -> dict[str, tuple[tuple[int, ...], type]]:
    """Each field's shape per episode, and its dtype."""
    n, t = info.num_agents, length
    discrete = info.action_kind == "discrete"
    a = info.action_dim if discrete else 0
    return {
        "obs": ((t + 1, n, info.obs_dim), np.float32),
        "state": ((t + 1, info.state_dim), np.float32),
        "avail_actions": ((t + 1, n, a), np.float32),
        "actions": (((t, n), np.int64) if discrete else ((t, n, info.action_dim), np.float32)),
        "rewards": ((t, n), np.float32),
        "agent_mask": ((t, n), np.float32),
        "terminated": ((t,), np.float32),
        "filled": ((t,), np.float32),
    }


class EpisodeBuffer:
    """``capacity`` whole episodes, the oldest overwritten first."""

    def __init__(self, info: EnvInfo, capacity: int) -> None:
        if info.max_episode_steps is None:
            raise ValueError("an episode buffer needs an env with an episode limit")
        self.capacity = capacity
        self.length = info.max_episode_steps
        self._shapes = _shapes(info, self.length)
        self._data = self._zeros(capacity)
        # The episode each env copy is playing, and how many of its steps are stored.
        self._staged = self._zeros(info.num_envs)
        self._steps = np.zeros(info.num_envs, np.int64)
        self._copies = np.arange(info.num_envs)
        self.position = 0
        self.size = 0
        self._batches: dict[int, EpisodeBatch] = {}

    def _zeros(self, rows: int) -> dict[str, Array]:
        return {
            name: np.zeros((rows, *shape), dtype) for name, (shape, dtype) in self._shapes.items()
        }

    def add(self, obs: Observation, actions: Array, transition: Transition) -> None:
        """Store one batched step (copy ``e``'s in its staged episode); commit the episodes that
        ended with it."""
        ended = transition.terminated | transition.truncated
        if np.any((self._steps >= self.length) & ~ended):
            raise ValueError(f"an episode ran past the env's episode limit ({self.length} steps)")
        e, t, s = self._copies, self._steps, self._staged
        s["obs"][e, t] = obs.obs
        s["state"][e, t] = obs.state
        s["avail_actions"][e, t] = obs.avail_actions
        s["actions"][e, t] = actions
        s["rewards"][e, t] = transition.rewards
        s["agent_mask"][e, t] = obs.agent_mask
        s["terminated"][e, t] = transition.terminated
        s["filled"][e, t] = 1.0
        self._steps += 1
        for i in np.flatnonzero(ended):
            end = self._steps[i]
            s["obs"][i, end] = transition.final_obs[i]
            s["state"][i, end] = transition.final_state[i]
            s["avail_actions"][i, end] = transition.final_avail_actions[i]
            self._commit(int(i))

    def _commit(self, copy: int) -> None:
        """Move copy ``copy``'s staged episode into the ring and clear its staging row."""
        for name, array in self._data.items():
            array[self.position] = self._staged[name][copy]
            self._staged[name][copy] = 0
        self._steps[copy] = 0
        self.position = (self.position + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> EpisodeBatch:
        """``batch_size`` distinct stored episodes, drawn uniformly. The batch's arrays are reused
        by the next ``sample`` of the same size."""
        if batch_size > self.size:
            raise ValueError(f"cannot sample {batch_size} episodes from {self.size} stored")
        index = rng.choice(self.size, batch_size, replace=False)
        batch = self._batches.get(batch_size)
        if batch is None:
            batch = EpisodeBatch(**self._zeros(batch_size))
            self._batches[batch_size] = batch
        for field in fields(EpisodeBatch):
            np.take(self._data[field.name], index, axis=0, out=getattr(batch, field.name))
        return batch

    def state(self) -> dict[str, Array]:
        """The committed episodes and the write position, as checkpoint tensors ``episodes/...``
        (staged, unfinished episodes are not kept: resume is exact at episode boundaries)."""
        tensors = {f"episodes/{name}": array[: self.size] for name, array in self._data.items()}
        tensors["episodes/position"] = np.array(self.position, np.int64)
        return tensors

    def load_state(self, tensors: dict[str, Array]) -> None:
        """Restore what ``state`` returned; nothing is staged afterwards."""
        size = int(tensors["episodes/filled"].shape[0])
        if size > self.capacity:
            raise ValueError(f"the checkpoint holds {size} episodes; capacity is {self.capacity}")
        for name, array in self._data.items():
            stored = tensors[f"episodes/{name}"]
            if stored.shape[1:] != array.shape[1:]:
                raise ValueError(
                    f"episodes/{name} has shape {stored.shape[1:]} per episode, not "
                    f"{array.shape[1:]} (another env or episode limit?)"
                )
            array[:size] = stored
            array[size:] = 0
        self.size = size
        self.position = int(tensors["episodes/position"])
        for array in self._staged.values():
            array[...] = 0
        self._steps[...] = 0
