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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from learners.config import AlgorithmConfig


class WQMIXConfig(AlgorithmConfig):
    """Hyperparameters of Weighted QMIX (feed-forward agents, transitions from a replay buffer)."""

    env_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    weighting: Literal["ow", "cw"] = "ow"
    """``ow``: optimistic weighting (full weight where Q_tot < target); ``cw``: central weighting
    (full weight on the greedy joint action or where the target beats Q* of it). Any other value
    is refused."""
    alpha: float = Field(default=0.1, gt=0, le=1)
    """The weight of the joint actions the weighting does not favour (1 would be plain QMIX)."""
    learning_rate: float = Field(default=5e-4, gt=0, le=1)
    """Adam step size of every network."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    batch_size: int = Field(default=128, ge=1, le=65536)
    """Transitions per gradient step, sampled uniformly from the replay buffer."""
    buffer_size: int = Field(default=50_000, ge=1, le=10_000_000)
    """Replay buffer capacity in transitions (rows of all agents); the oldest are overwritten."""
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
    hidden_sizes: tuple[int, ...] = Field(default=(64, 64), min_length=1, max_length=8)
    """Hidden layers of the agent networks (the QMIX agents and the central agents)."""
    mixing_embed_dim: int = Field(default=32, ge=1, le=1024)
    """Width of QMIX's monotonic mixing layer."""
    hypernet_hidden: int = Field(default=64, ge=1, le=1024)
    """Hidden width of the hypernetworks that produce the mixing weights from the state."""
    central_mixer_hidden: int = Field(default=256, ge=1, le=4096)
    """Hidden width of the unrestricted feed-forward mixer of Q*."""
    share_parameters: bool = True
    """One agent network for all agents with a one-hot agent id in its input; ``false`` gives
    each agent its own parameters."""
    max_grad_norm: float | None = Field(default=10.0, gt=0)
    """Clip the gradient of all parameters together to this global norm; ``null`` turns clipping
    off."""


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
    target_mean: float
    grad_norm: float
    """Global gradient norm before clipping."""
    epsilon: float
    """The exploration rate acting uses now."""

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def epsilon_at(config: WQMIXConfig, explore_steps: int) -> float:
    """Linear decay from ``epsilon_start`` to ``epsilon_end`` over ``epsilon_decay_steps``."""
    progress = min(explore_steps / config.epsilon_decay_steps, 1.0)
    return config.epsilon_start + (config.epsilon_end - config.epsilon_start) * progress
