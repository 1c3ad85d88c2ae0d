"""Weighted QMIX: Rashid et al., "Weighted QMIX: Expanding Monotonic Value Function Factorisation
for Deep Multi-Agent Reinforcement Learning", NeurIPS 2020.

Agents act greedily (epsilon-greedily while training) on per-agent utilities Q_i(o_i, u_i). QMIX
mixes the utilities of the taken actions monotonically (hypernetworks with non-negative weights,
conditioned on the global state) into Q_tot, whose joint argmax is every agent's own argmax. WQMIX
adds an unrestricted central value Q*(s, u): a separate agent network's utilities at the taken
actions, mixed by a feed-forward network of the state. Both regress onto one target,
y = r + gamma * (1 - terminated) * Q*_target(s', u'), with u' the live QMIX agents' greedy joint
action (double Q-learning); Q* with the plain squared error, Q_tot with a weighted one that puts
full weight on the joint actions that matter and ``alpha`` on the rest:

- ``ow`` (optimistic): full weight where Q_tot under-estimates the target;
- ``cw`` (central): full weight on the greedy joint action and wherever the target beats Q* of
  the greedy joint action.

The weights and losses are ``learners.functional.wqmix`` (one definition for every backend); each
backend supplies the networks and the gradient step. The team reward is the mean of the agents'
rewards. Target networks are copied from the live ones every ``target_update_interval`` updates.

With ``recurrent`` the agent networks carry a GRU (after their first hidden layer) and train on
whole episodes from an episode replay buffer (``learners.buffers.episodes``): each sampled episode
is unrolled from a zero hidden state, and the same target and losses are masked means over the
real (``filled``) steps. ``episode_inputs`` arranges a sampled batch time-first for every backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field, ValidationInfo, field_validator

from learners.config import AlgorithmConfig, LayerWidth
from learners.envs.teams import TeamSeats, team_seats

if TYPE_CHECKING:
    from learners.buffers.episodes import EpisodeBatch
    from learners.envs.base import EnvInfo


_MPE_DEFAULTS: Mapping[str, Any] = {
    # MPE's episodes end only by time limit and bootstrap there, so the discount sets the horizon:
    # 0.95 with 256-transition batches reached -15.9 on simple_spread_v3 at 200k env steps where
    # 0.99 with 128 was at -19.2 (seed 0), and 0.9 took the means over three seeds at 1M from
    # -15.0 to -11.8 (CW) and from -12.7 to -10.4 (OW) (docs/results/2026-11-22-longer-budgets.md
    # and docs/results/2026-11-22-wqmix-discount-09.md).
    "gamma": 0.9,
    "batch_size": 256,
}


class WQMIXConfig(AlgorithmConfig):
    """Hyperparameters of Weighted QMIX: feed-forward agents on transitions from a replay buffer,
    or (``recurrent``) GRU agents on whole episodes from an episode buffer. The defaults, with
    the MPE overrides (``gamma`` 0.9, ``batch_size`` 256), learn simple_spread_v3."""

    env_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {"mpe:*": _MPE_DEFAULTS}
    policy_fields: ClassVar[tuple[str, ...]] = (
        "hidden_sizes",
        "recurrent",
        "rnn_hidden_size",
        "share_parameters",
        "share_across_groups",
    )
    network_fields: ClassVar[tuple[str, ...]] = (
        *policy_fields,
        "mixing_embed_dim",
        "hypernet_hidden",
        "central_mixer_hidden",
        "central_mixer_layers",
        "central_mixer_value",
    )
    mutable_fields: ClassVar[tuple[str, ...]] = (
        "learning_rate",
        "gamma",
        "alpha",
        "epsilon_start",
        "epsilon_end",
        "max_grad_norm",
    )

    weighting: Literal["ow", "cw"] = "ow"
    """``ow``: optimistic weighting (full weight where Q_tot < target); ``cw``: central weighting
    (full weight on the greedy joint action or where the target beats Q* of it). Any other value
    is refused."""
    recurrent: bool = False
    """Put a GRU after the first hidden layer of the agent networks (QMIX's and the central ones);
    training then samples whole episodes (``episode_batch_size`` of them, from a buffer of
    ``episode_buffer_size``) and unrolls each from a zero hidden state, instead of transitions."""
    alpha: float = Field(default=0.1, gt=0, le=1)
    """The weight of the joint actions the weighting does not favour (1 would be plain QMIX)."""
    learning_rate: float = Field(default=5e-4, gt=0, le=1)
    """Adam step size of every network."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    batch_size: int = Field(default=128, ge=1, le=65536)
    """Feed-forward only: transitions per gradient step, sampled uniformly from the replay
    buffer."""
    buffer_size: int = Field(default=50_000, ge=1, le=10_000_000)
    """Feed-forward only: replay buffer capacity in transitions (rows of all agents); the oldest
    are overwritten."""
    episode_batch_size: int = Field(default=32, ge=1, le=4096)
    """Recurrent only: whole episodes per gradient step, drawn uniformly without replacement
    from the episode buffer (each padded to the env's episode limit, the padding masked out).
    Updates start once the buffer holds this many episodes."""
    episode_buffer_size: int = Field(default=5000, ge=1, le=100_000)
    """Recurrent only: episode buffer capacity in whole episodes; the oldest are overwritten.
    At least ``episode_batch_size``."""
    learning_starts: int = Field(default=2000, ge=0)
    """Env steps of uniformly random (available) actions before the first update."""
    updates_per_step: float = Field(default=0.125, gt=0, le=64)
    """Gradient steps per env step (counted over all parallel envs)."""
    target_update_interval: int = Field(default=200, ge=1)
    """Copy the live central networks into the target ones after every this many updates."""
    epsilon_start: float = Field(default=1.0, ge=0, le=1)
    """Exploration rate of epsilon-greedy acting when exploration starts."""
    epsilon_end: float = Field(default=0.05, ge=0, le=1)
    """Exploration rate after ``epsilon_decay_steps``."""
    epsilon_decay_steps: int = Field(default=50_000, ge=1)
    """Exploring env steps (after ``learning_starts``) over which epsilon falls linearly."""
    hidden_sizes: tuple[LayerWidth, ...] = Field(default=(64, 64), min_length=1, max_length=8)
    """Hidden layers of the agent networks (the QMIX agents and the central agents)."""
    rnn_hidden_size: int = Field(default=64, ge=1, le=4096)
    """Recurrent only: the GRU's hidden size."""
    mixing_embed_dim: int = Field(default=32, ge=1, le=1024)
    """Width of QMIX's monotonic mixing layer."""
    hypernet_hidden: int = Field(default=64, ge=1, le=1024)
    """Hidden width of the hypernetworks that produce the mixing weights from the state."""
    central_mixer_hidden: int = Field(default=256, ge=1, le=4096)
    """Hidden width of the unrestricted feed-forward mixer of Q* (and of its value head)."""
    central_mixer_layers: int = Field(default=2, ge=1, le=8)
    """Hidden layers of the unrestricted mixer of Q* (the authors' implementation has 3)."""
    central_mixer_value: bool = False
    """Add a state-value head V(s) to Q* (one hidden layer of ``central_mixer_hidden``), as the
    authors' implementation does; with ``central_mixer_layers: 3`` it is their central mixer."""
    share_parameters: bool = True
    """One agent network for all agents with a one-hot agent id in its input (one per group when
    the agents come in groups of different spaces, unless ``share_across_groups``); ``false``
    gives each agent its own parameters."""
    share_across_groups: bool = False
    """With ``share_parameters``: one agent network for all the groups, inputs padded to the
    largest agent's (simple_speaker_listener's speaker and listener share it). ``false``: each
    group (agents of the same spaces) has its own, ``(G, ...)`` tensors, its agents told apart by
    their place in the group. An env of one group trains the same either way. Specs stored before
    this field existed read as ``true``, as their runs were trained."""
    max_grad_norm: float | None = Field(default=10.0, gt=0)
    """Clip the gradient of all parameters together to this global norm; ``null`` turns clipping
    off."""

    @field_validator("episode_buffer_size")
    @classmethod
    def _episodes_fit(cls, value: int, info: ValidationInfo) -> int:
        batch = info.data.get("episode_batch_size")
        if info.data.get("recurrent") and batch is not None and value < batch:
            raise ValueError(f"must hold at least episode_batch_size ({batch}) episodes")
        return value


@dataclass(frozen=True)
class WQMIXStats:
    """What one WQMIX update reports, the same keys in every backend."""

    loss: float
    loss_qmix: float
    """Weighted squared TD error of Q_tot."""
    loss_central: float
    """Squared TD error of Q*."""
    weight_mean: float
    """Mean weight of the batch (1 = nothing down-weighted)."""
    q_tot_mean: float
    """Mean Q_tot of the batch (recurrent: over the real steps with a live agent)."""
    target_mean: float
    """Mean target y of the batch (recurrent: likewise)."""
    grad_norm: float
    """Global gradient norm before clipping."""
    epsilon: float
    """The exploration rate acting uses now."""

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def agent_seats(config: WQMIXConfig, info: EnvInfo) -> TeamSeats | None:
    """The agents' seats when the agent network is shared within each of several groups (one set
    of weights per group, ``(G, ...)`` tensors; WQMIX trains one team); ``None`` when one network
    serves every agent or every agent has its own."""
    if not config.share_parameters:
        return None
    return team_seats(info.sharing_sets(across_groups=config.share_across_groups))


def epsilon_at(config: WQMIXConfig, explore_steps: int) -> float:
    """Linear decay from ``epsilon_start`` to ``epsilon_end`` over ``epsilon_decay_steps``."""
    progress = min(explore_steps / config.epsilon_decay_steps, 1.0)
    return config.epsilon_start + (config.epsilon_end - config.epsilon_start) * progress


def epsilon_greedy(
    greedy: NDArray[np.int64],
    avail_actions: NDArray[np.float32],
    epsilon: float,
    generator: np.random.Generator,
) -> NDArray[np.int64]:
    """Each agent's greedy action (E, N), replaced with probability ``epsilon`` by one drawn
    uniformly over its available actions. Host-side, from a NumPy generator, so every backend
    draws the same numbers (Gumbel-max over log availability, then the coin flips)."""
    with np.errstate(divide="ignore"):
        scores = np.log(avail_actions) + generator.gumbel(size=avail_actions.shape)
    random_actions = np.argmax(scores, axis=-1)
    explore = generator.uniform(size=greedy.shape) < epsilon
    return np.where(explore, random_actions, greedy).astype(np.int64)


@dataclass(frozen=True)
class EpisodeInputs:
    """A sampled episode batch arranged for a recurrent update: time first, so a GRU runs over the
    leading axis. T is the padded episode length, B the episodes, N the agents."""

    obs: NDArray[np.float32]
    """(T+1, B, N, obs_dim): every step's observation and, at each episode's last index, the
    observation it ended on (what the target bootstraps from)."""
    state: NDArray[np.float32]
    """(T+1, B, state_dim), likewise."""
    avail_actions: NDArray[np.float32]
    """(T+1, B, N, A), likewise (step t+1's availability bounds the greedy action there)."""
    actions: NDArray[np.int64]
    """(T, B, N)"""
    agent_mask: NDArray[np.float32]
    """(T, B, N): the live agents of each step (also mask the next step's utilities, as in the
    feed-forward update: the env reports no agent mask for an episode's final observation)."""
    team_reward: NDArray[np.float32]
    """(T, B): the mean reward over each step's live agents."""
    terminated: NDArray[np.float32]
    """(T, B): 1 where the episode truly ended at that step (no bootstrap)."""
    mask: NDArray[np.float32]
    """(T, B): the loss mask, ``filled`` times "at least one live agent"; padding is 0."""


def episode_inputs(batch: EpisodeBatch) -> EpisodeInputs:
    """``batch`` (batch-first, from ``EpisodeBuffer.sample``) as time-first contiguous arrays, with
    the team reward and the loss mask computed on the host, the same numbers for every backend."""

    def time_first(x: NDArray[Any]) -> NDArray[Any]:
        return np.ascontiguousarray(np.swapaxes(x, 0, 1))

    agent_mask = time_first(batch.agent_mask)
    rewards = time_first(batch.rewards)
    live = agent_mask.sum(-1)
    team_reward = (rewards * agent_mask).sum(-1) / np.maximum(live, 1.0)
    mask = time_first(batch.filled) * agent_mask.max(-1)
    return EpisodeInputs(
        obs=time_first(batch.obs),
        state=time_first(batch.state),
        avail_actions=time_first(batch.avail_actions),
        actions=time_first(batch.actions),
        agent_mask=agent_mask,
        team_reward=team_reward.astype(np.float32),
        terminated=time_first(batch.terminated),
        mask=mask.astype(np.float32),
    )
