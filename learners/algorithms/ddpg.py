"""DDPG: Lillicrap et al., "Continuous control with deep reinforcement learning", ICLR 2016.

A deterministic actor mu(s) and a critic Q(s, a) learn off-policy from a replay buffer. The critic
regresses onto the TD target r + gamma * (1 - terminated) * Q'(s', mu'(s')) computed from slowly
tracking target networks, with no gradient through the target (the reference's torch copy computed
it with gradient tracking on: reference defect ``target-with-gradient``, docs/reference-defects.md);
the actor ascends Q(s, mu(s)). Exploration adds Gaussian noise to the actor's action. Time-limit
truncation is not termination: the target bootstraps through it.

Actions live in [-1, 1] (the env adapters scale them onto the env's bounds), so the actor ends in
``tanh`` and the noise scale means the same thing in every env.

This module holds the config and the backend-neutral math: the losses over ``Ops`` (shared with
MADDPG, and with every backend), the exploration noise (host NumPy), the typed stats and
``DDPGLearner``, the host side of every backend's learner (acting with exploration, the checkpoint's
layout). Each backend supplies the networks, the greedy forward pass and the gradient step.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from learners import rng as rngs
from learners.algorithms.learner_state import NetworkState
from learners.config import AlgorithmConfig, LayerWidth
from learners.envs.base import EnvInfo, Observation
from learners.functional.losses import masked_mean
from learners.functional.ops import A, Ops

OUTPUT_INIT_SCALE = 3e-3
"""The last layers start in [-3e-3, 3e-3], as in the DDPG paper: near-zero actions and values."""


class DDPGConfig(AlgorithmConfig):
    """Hyperparameters of DDPG. The defaults learn Pendulum-v1 within 20,000 env steps."""

    env_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    policy_fields: ClassVar[tuple[str, ...]] = ("hidden_sizes",)
    network_fields: ClassVar[tuple[str, ...]] = ("hidden_sizes",)
    mutable_fields: ClassVar[tuple[str, ...]] = (
        "learning_rate_actor",
        "learning_rate_critic",
        "gamma",
        "tau",
        "exploration_noise",
        "max_grad_norm",
    )

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
    """Std of the Gaussian noise added to actions, as a fraction of the action range's half-width
    (actions live in [-1, 1])."""
    hidden_sizes: tuple[LayerWidth, ...] = Field(default=(256, 256), min_length=1, max_length=8)
    """Widths of the hidden layers of actor and critic (ReLU)."""
    max_grad_norm: float | None = Field(default=None, gt=0)
    """Clip each network's gradients to this global norm; ``null`` turns clipping off."""


@dataclass(frozen=True)
class DDPGStats:
    """One update's figures; every backend's DDPG and MADDPG return these keys."""

    loss_actor: float
    """-mean Q(s, mu(s)) over live agents."""
    loss_critic: float
    """mean (Q(s, a) - td_target)^2 over live agents."""
    q_value: float
    """mean Q(s, a) of the batch."""
    td_target: float
    """mean TD target of the batch."""
    grad_norm_actor: float
    """The actor's global gradient norm before clipping."""
    grad_norm_critic: float
    """The critic's global gradient norm before clipping."""

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def critic_loss(ops: Ops[A], q: A, target: A, mask: A) -> A:
    """The critic's regression loss: masked mean of (Q(s, a) - target)^2. ``target`` is
    ``learners.functional.returns.td_target`` of the target networks' Q and carries no gradient."""
    error = q - target
    return masked_mean(ops, error * error, mask)


def actor_loss(ops: Ops[A], q_policy: A, mask: A) -> A:
    """The actor's loss: -masked mean of Q(s, mu(s)) (gradient ascent on Q through the action)."""
    return -masked_mean(ops, q_policy, mask)


def gaussian_exploration(
    actions: NDArray[np.float32], noise_std: float, rng: np.random.Generator
) -> NDArray[np.float32]:
    """Gaussian exploration: ``actions`` + N(0, noise_std^2), clipped back into [-1, 1]."""
    if noise_std == 0.0:
        return actions
    noisy = actions + rng.normal(0.0, noise_std, actions.shape).astype(np.float32)
    return np.clip(noisy, -1.0, 1.0, out=noisy)


def network_args(
    config: DDPGConfig, info: EnvInfo, network: Literal["actor", "critic"]
) -> dict[str, Any]:
    """Every backend's ``MLP`` arguments for DDPG's actor, mu(o) in [-1, 1] (``tanh``), or its
    critic, Q(o, a)."""
    if network == "actor":
        return {
            "in_dim": info.obs_dim,
            "hidden_sizes": config.hidden_sizes,
            "out_dim": info.action_dim,
            "tanh_output": True,
            "output_scale": OUTPUT_INIT_SCALE,
        }
    return {
        "in_dim": info.obs_dim + info.action_dim,
        "hidden_sizes": config.hidden_sizes,
        "out_dim": 1,
        "output_scale": OUTPUT_INIT_SCALE,
    }


class DDPGLearner(NetworkState):
    """The host side of a DDPG learner in any backend (MADDPG's learners subclass theirs).

    It checks the env, keeps the exploration generator and the update counter, explores around the
    greedy actions a backend computes, and lays out the checkpoint: the four networks, both Adams'
    moments, ``rng/exploration`` and ``counters/updates``. A subclass builds its networks after
    ``__init__`` and implements the abstract methods (``NetworkState``'s for every name in
    ``networks``; the optimisers' for ``"actor"`` and ``"critic"``).
    """

    uses_state = False
    networks = ("actor", "critic", "target_actor", "target_critic")

    def __init__(self, config: DDPGConfig, info: EnvInfo, seed: int) -> None:
        self._check_info(info)
        self.config = config
        self.info = info
        self.rng = rngs.generator(seed, "exploration")
        self.updates = 0

    def _network(self, name: str) -> Any:
        return getattr(self, name)

    def _optimizer(self, name: str) -> Any:
        return getattr(self, f"{name}_optimizer")

    def _check_info(self, info: EnvInfo) -> None:
        if info.action_kind != "continuous":
            raise ValueError(
                f"{type(self).__name__} needs continuous actions, not {info.action_kind}"
            )

    @abstractmethod
    def _greedy_actions(self, observation: Observation) -> NDArray[np.float32]:
        """The deterministic policy's actions (E, N, action_dim) on the host."""

    def act(self, observation: Observation, *, explore: bool) -> NDArray[Any]:
        """The greedy actions, with Gaussian exploration noise from ``rng/exploration`` when
        ``explore``."""
        actions = self._greedy_actions(observation)
        if explore:
            return gaussian_exploration(actions, self.config.exploration_noise, self.rng)
        return actions

    def state(self) -> dict[str, NDArray[Any]]:
        """The four networks, both Adams' moments, the exploration generator and the counter."""
        tensors: dict[str, NDArray[Any]] = {}
        for name in self.networks:
            tensors.update(self._module_state(name))
        tensors.update(self._optimizer_state("actor"))
        tensors.update(self._optimizer_state("critic"))
        tensors["rng/exploration"] = rngs.state_tensor(self.rng)
        tensors["counters/updates"] = np.array(self.updates, np.int64)
        return tensors

    def load_state(self, tensors: Mapping[str, NDArray[Any]], *, policy_only: bool = False) -> None:
        """Restore ``state()``'s tensors (only the actor's with ``policy_only``)."""
        self._load_module("actor", tensors)
        if policy_only:
            return
        for name in self.networks[1:]:
            self._load_module(name, tensors)
        self._load_optimizer("actor", tensors)
        self._load_optimizer("critic", tensors)
        rngs.restore(self.rng, tensors["rng/exploration"])
        self.updates = int(tensors["counters/updates"])
