"""The batched environment interface every learner and runner sees.

Whatever the suite, ``num_envs`` copies step in lockstep and everything comes back as NumPy arrays
shaped ``(envs, agents, ...)``. A single-agent Gymnasium env is a multi-agent env with one agent, so
one set of runners and buffers serves both.

- ``obs`` is padded with zeros to the largest agent's observation size; ``obs_mask`` marks the real
  features (simple_adversary's agents see different amounts). The learners take the zero padding
  as input like any feature (with the one-hot agent id, a shared network tells the agents apart).
- ``agent_mask`` is 1 where an agent is alive this step and 0 where it is absent or done.
- ``avail_actions`` is 1 for each discrete action an agent may take (all ones for MPE).
- ``state`` is the global state that centralised critics and mixers condition on.
- ``EnvInfo.teams`` names each agent's side (``learners.envs.teams``); ``Transition.agent_returns``
  gives each agent's return of every ended episode, from which each team's return follows.
- Episodes end by ``terminated`` (a true end: do not bootstrap) or ``truncated`` (a time limit:
  bootstrap from ``final_obs``/``final_state``, the observation the episode ended on). Copies that
  ended are reset automatically; their ``obs`` is already the first observation of the next episode.
- Continuous actions are always given in [-1, 1] per dimension; the adapter clips them and maps them
  linearly onto the env's own bounds (``EnvInfo.action_low``/``action_high``), so every learner can
  use a ``tanh`` actor and one noise scale whatever the env.
- Episode ``k`` of copy ``i`` is seeded from ``(seed, i, k)`` (``episode_seed``), so a run that
  restarts its envs at the episode indices it had reached replays exactly the episodes it would
  have played.
- The arrays an env returns are its own preallocated buffers, double-buffered: they stay valid
  through the next ``step`` and are overwritten by the one after. Copy what you keep longer.
- One env keeps what is observed elsewhere: the vector engine on a torch device
  (``learners.envs.vector.adapter``) returns ``obs``, ``state`` and ``final_*`` as tensors there,
  and says so with its ``observation_ops`` (``observation_ops(env)`` below); everything else is
  NumPy on the host for every env.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from learners.envs.teams import sharing_sets
from learners.envs.vector.arrays import NUMPY, ArrayOps

FloatArray = NDArray[np.float32]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class EnvInfo:
    """The static shapes and spaces of a batched environment."""

    num_envs: int
    num_agents: int
    agent_ids: tuple[str, ...]
    teams: tuple[str, ...]
    """Each agent's team, in ``agent_ids`` order (``learners.envs.teams``): ``adversary`` and
    ``agent`` in mpe2's competitive scenarios, ``agent`` alone in cooperative ones and Gymnasium."""
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
    """Continuous only: the env's own lower bound per dimension, shape ``(action_dim,)`` (the
    adapter maps the learners' -1 onto it)."""
    action_high: FloatArray | None
    """Continuous only: the env's own upper bound per dimension (the learners' +1 maps onto it)."""
    max_episode_steps: int | None
    groups: tuple[str, ...] = ()
    """Each agent's group, in ``agent_ids`` order: agents of one group share observation and
    action spaces (simple_speaker_listener's ``speaker`` and ``listener`` are two). Groups say who
    shares a body, teams who plays with whom. Empty (a manifest written before groups were
    recorded): each agent's team."""
    action_dims: tuple[int, ...] = ()
    """Each agent's real action size (``action_dim`` is their maximum: a smaller agent's padded
    discrete actions are unavailable, its padded continuous dimensions are dropped). Empty: every
    agent's is ``action_dim``."""

    @property
    def group_names(self) -> tuple[str, ...]:
        """The distinct groups, in the order their first agent appears."""
        return tuple(dict.fromkeys(self.groups or self.teams))

    @property
    def team_names(self) -> tuple[str, ...]:
        """The distinct teams, in the order their first agent appears."""
        return tuple(dict.fromkeys(self.teams))

    def sharing_sets(self, *, across_groups: bool) -> tuple[str, ...]:
        """Each agent's sharing set (``learners.envs.teams.sharing_sets``): its team, split by
        group unless ``across_groups``. What networks shared within a set are laid out by."""
        return sharing_sets(self.teams, self.groups, across_groups=across_groups)


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
    final_avail_actions: FloatArray
    """(E, N, action_dim) likewise for the available actions (what a bootstrap maximises over)."""
    episode_returns: FloatArray
    """(E,) for ended episodes: the mean over agents of each agent's undiscounted return (else
    NaN)."""
    episode_lengths: NDArray[np.int64]
    """(E,) for ended episodes: their length in steps; 0 otherwise."""
    agent_returns: FloatArray
    """(E, N) for ended episodes: each agent's undiscounted return (else NaN); ``episode_returns``
    is its mean over agents, and a team's return the mean over the team's agents."""


class VecEnv(Protocol):
    """``num_envs`` environments stepped in lockstep with automatic reset."""

    info: EnvInfo
    episode_index: NDArray[np.int64]
    """(E,) the index ``k`` of the episode each copy is playing now."""

    def reset(
        self, seed: int | None = None, episode_index: NDArray[np.int64] | None = None
    ) -> Observation:
        """Reset every copy; copy ``i`` starts episode ``episode_index[i]`` (default 0), seeded from
        ``(seed, i, k)``. ``seed`` defaults to the seed the env was made with."""

    def step(self, actions: NDArray[np.generic]) -> tuple[Observation, Transition]:
        """Act with ``actions`` of shape (E, N, action_dim) in [-1, 1] (continuous) or (E, N)
        integers (discrete)."""

    def render(self) -> NDArray[np.uint8]:
        """An RGB frame of copy 0, (H, W, 3)."""

    def close(self) -> None:
        """Release the environments."""


def observation_ops(env: VecEnv) -> ArrayOps:
    """The array operations of ``env``'s observations: NumPy's, unless the env keeps them on a
    device (an ``observation_ops`` attribute, which only the vector engine on torch has)."""
    ops: ArrayOps = getattr(env, "observation_ops", NUMPY)
    return ops


def episode_seed(seed: int, copy: int, episode: int) -> int:
    """The seed of episode ``episode`` of env copy ``copy`` in a run seeded ``seed``.

    A hash of the triple (NumPy's ``SeedSequence``), not ``seed + copy``: neighbouring runs and
    copies must not share episodes.
    """
    state = np.random.SeedSequence((seed, copy, episode)).generate_state(1, np.uint32)
    return int(state[0])
