"""DDPG: Lillicrap et al., "Continuous control with deep reinforcement learning", ICLR 2016.

A deterministic actor mu(s) and a critic Q(s, a) learn off-policy from a replay buffer. The critic
regresses onto the TD target r + gamma * (1 - terminated) * Q'(s', mu'(s')) computed from slowly
tracking target networks, with no gradient through the target; the actor ascends Q(s, mu(s)).
Exploration adds Gaussian noise to the actor's action. Time-limit truncation is not termination:
the target bootstraps through it.

This module holds the config and the backend-neutral math; each backend supplies networks and the
gradient step.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from pydantic import Field

from learners.config import AlgorithmConfig


class DDPGConfig(AlgorithmConfig):
    """Hyperparameters of DDPG. The defaults learn Pendulum-v1 within 20,000 env steps."""

    env_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    learning_rate_actor: float = Field(default=1e-3, gt=0, le=1)
    """Adam step size of the actor."""
    learning_rate_critic: float = Field(default=1e-3, gt=0, le=1)
    """Adam step size of the critic."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    tau: float = Field(default=0.005, gt=0, le=1)
    """Soft target update rate: target <- tau * live + (1 - tau) * target after every update."""
    batch_size: int = Field(default=256, ge=1, le=65536)
    """Transitions per gradient step, sampled uniformly from the replay buffer."""
    buffer_size: int = Field(default=100_000, ge=1, le=10_000_000)
    """Replay buffer capacity in transitions; the oldest are overwritten."""
    learning_starts: int = Field(default=1000, ge=0)
    """Env steps of uniformly random actions before the first update."""
    updates_per_step: float = Field(default=1.0, gt=0, le=64)
    """Gradient steps per env step (counted over all parallel envs)."""
    exploration_noise: float = Field(default=0.1, ge=0, le=10)
    """Std of the Gaussian noise added to actions, as a fraction of the action range's half-width."""
    hidden_sizes: tuple[int, ...] = Field(default=(256, 256), min_length=1, max_length=8)
    """Widths of the hidden layers of actor and critic (ReLU)."""
    grad_clip_norm: float | None = Field(default=None, gt=0)
    """Clip each network's gradient to this global norm; ``null`` turns clipping off."""
