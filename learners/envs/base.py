"""The batched environment interface every learner and runner sees.

Whatever the suite, ``num_envs`` copies step in lockstep and everything comes back as NumPy arrays
shaped ``(envs, agents, ...)``. A single-agent Gymnasium env is a multi-agent env with one agent, so
one set of runners and buffers serves both.

- ``obs`` is padded to the largest agent's observation size; ``obs_mask`` marks the real features so
  padding is masked, never learned from (simple_adversary's agents see different amounts).
- ``agent_mask`` is 1 where an agent is alive this step and 0 where it is absent or done.
- ``avail_actions`` is 1 for each discrete action an agent may take (all ones for MPE).
- ``state`` is the global state that centralised critics and mixers condition on.
- Episodes end by ``terminated`` (a true end: do not bootstrap) or ``truncated`` (a time limit:
  bootstrap from ``final_obs``/``final_state``, the observation the episode ended on). Copies that
  ended are reset automatically; their ``obs`` is already the first observation of the next episode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float32]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class EnvInfo:
    """The static shapes and spaces of a batched environment."""

    num_envs: int
    num_agents: int
    agent_ids: tuple[str, ...]
    obs_dim: int
    """Padded per-agent observation size."""
    obs_dims: tuple[int, ...]
    """Each agent's real observation size (``obs_dim`` is their maximum)."""
    state_dim: int
    action_kind: str
    """``continuous`` or ``discrete``."""
    action_dim: int
    """Continuous: the action vector's size. Discrete: the number of actions."""
    action_low: FloatArray | None
    """Continuous only: per-dimension lower bound, shape ``(action_dim,)``."""
    action_high: FloatArray | None
    """Continuous only: per-dimension upper bound, shape ``(action_dim,)``."""
    max_episode_steps: int | None


@dataclass
class Observation:
    """What the agents see after a reset or a step. Shapes: E envs, N agents."""

    obs: FloatArray
    """(E, N, obs_dim), zero in padded features."""
    obs_mask: FloatArray
    """(E, N, obs_dim), 1 for real features, 0 for padding."""
    state: FloatArray
    """(E, state_dim)"""
    agent_mask: FloatArray
    """(E, N)"""
    avail_actions: FloatArray
    """(E, N, action_dim) for discrete actions; (E, N, 0) for continuous ones."""


@dataclass
class Transition:
    """The outcome of one batched step, beside the next ``Observation``."""

    rewards: FloatArray
    """(E, N) each agent's own reward."""
    terminated: BoolArray
    """(E,) the episode truly ended: no bootstrap."""
    truncated: BoolArray
    """(E,) the episode hit its time limit: bootstrap from ``final_obs``."""
    final_obs: FloatArray
    """(E, N, obs_dim) the last observation of each ended episode (else equal to the next obs)."""
    final_state: FloatArray
    """(E, state_dim) likewise for the global state."""
    episode_returns: FloatArray
    """(E,) for ended episodes: the mean over agents of each agent's undiscounted return; NaN otherwise."""
    episode_lengths: NDArray[np.int64]
    """(E,) for ended episodes: their length in steps; 0 otherwise."""


class VecEnv(Protocol):
    """``num_envs`` environments stepped in lockstep with automatic reset."""

    info: EnvInfo

    def reset(self, seed: int) -> Observation:
        """Reset every copy; copy ``i``'s episodes are seeded from ``seed`` deterministically."""

    def step(self, actions: NDArray[np.generic]) -> tuple[Observation, Transition]:
        """Act with ``actions`` of shape (E, N, action_dim) (continuous) or (E, N) (discrete)."""

    def render(self) -> NDArray[np.uint8]:
        """An RGB frame of copy 0, (H, W, 3)."""

    def close(self) -> None:
        """Release the environments."""
