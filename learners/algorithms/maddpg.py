"""MADDPG: Lowe et al., "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive Environments",
NeurIPS 2017.

Each agent has a deterministic actor on its own observation and a centralised critic Q_i(o_1..o_N,
a_1..a_N) that sees every agent's observation and action; the critics are only used in training, so
the agents act on their own observations. It is DDPG with a joint critic: the TD target, the losses,
soft target updates and Gaussian exploration are DDPG's (``learners.algorithms.ddpg``), applied per
agent with the agent mask, and each agent's target uses its own reward.

Discrete actions use the Gumbel-softmax relaxation (Jang et al., 2017): the actor outputs logits;
acting samples argmax(logits + Gumbel noise) when exploring and argmax(logits) when not; the critic
takes one-hot actions; the actor's update goes through a straight-through Gumbel-softmax sample
(one-hot forward, softmax gradient) and the target policy is the target actor's greedy one-hot.

By default the agents share one actor and one critic and tell themselves apart by a one-hot agent
id appended to their inputs; ``share_parameters=false`` gives every agent its own networks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from learners.algorithms.ddpg import DDPGConfig


class MADDPGConfig(DDPGConfig):
    """Hyperparameters of MADDPG (DDPG's, plus parameter sharing and the Gumbel temperature)."""

    env_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "mpe:*": {
            "gamma": 0.95,
            "tau": 0.01,
            "hidden_sizes": (64, 64),
            "batch_size": 256,
            "buffer_size": 200_000,
            "learning_starts": 2000,
            "updates_per_step": 0.125,
            "learning_rate_actor": 1e-3,
            "learning_rate_critic": 1e-3,
            "max_grad_norm": 0.5,
        },
    }

    share_parameters: bool = True
    """One actor and one critic for all agents, told apart by one-hot agent ids; ``false`` gives
    each agent its own actor and critic."""
    gumbel_temperature: float = Field(default=1.0, gt=0, le=100)
    """Temperature of the Gumbel-softmax relaxation of discrete actions (unused for continuous)."""


def explore_discrete(
    logits: NDArray[np.float32], avail_actions: NDArray[np.float32], rng: np.random.Generator
) -> NDArray[np.int64]:
    """A Gumbel-max sample per agent: argmax(logits + Gumbel noise) over the available actions,
    i.e. a draw from softmax(logits) restricted to them."""
    scores = logits + rng.gumbel(size=logits.shape).astype(np.float32)
    scores = np.where(avail_actions > 0.5, scores, -np.inf)
    actions: NDArray[np.int64] = np.argmax(scores, axis=-1).astype(np.int64)
    return actions


def greedy_discrete(
    logits: NDArray[np.float32], avail_actions: NDArray[np.float32]
) -> NDArray[np.int64]:
    """argmax(logits) over the available actions."""
    scores = np.where(avail_actions > 0.5, logits, -np.inf)
    actions: NDArray[np.int64] = np.argmax(scores, axis=-1).astype(np.int64)
    return actions
