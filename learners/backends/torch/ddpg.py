"""DDPG in PyTorch (Lillicrap et al., ICLR 2016); the math is ``learners.algorithms.ddpg``.

The actor maps an observation to an action in [-1, 1]; the critic maps (observation, action) to a
value. Both act on the agent axis as a batch axis, so the learner runs on the (B, N, ...) arrays of
the replay buffer unchanged (N = 1 for Gymnasium). The TD target is computed under ``no_grad`` from
the target networks and passes through ``td_target``'s stop-gradient as well: the critic is never
trained through its own target (reference defect ``target-with-gradient``,
docs/reference-defects.md).

``_build_networks``, ``_policy``, ``_q``, ``_batch_actions`` and ``_actor_actions`` are where
MADDPG differs (agent ids, a centralised critic, discrete actions, each agent's own action in its
actor's update); it subclasses this class and keeps everything else: the update, the losses, soft
updates and state.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from learners.algorithms.ddpg import (
    DDPGConfig,
    DDPGLearner,
    DDPGStats,
    actor_loss,
    critic_loss,
    network_args,
)
from learners.backends.torch.networks import (
    MLP,
    TorchState,
    adam,
    gradient_step,
    seeded_init,
    soft_update,
)
from learners.backends.torch.ops import TorchOps
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation
from learners.functional.returns import td_target


class TorchDDPG(TorchState, DDPGLearner):
    """DDPG's networks and optimisers on one torch device."""

    def __init__(self, config: DDPGConfig, info: EnvInfo, device: str, seed: int) -> None:
        super().__init__(config, info, seed)
        self.device = torch.device(device)
        self.ops = TorchOps(self.device)
        with seeded_init(seed):
            self.actor, self.critic = self._build_networks()
        self.actor.to(self.device)
        self.critic.to(self.device)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_params = list(self.actor.parameters())
        self.critic_params = list(self.critic.parameters())
        self.actor_optimizer = adam(self.actor_params, config.learning_rate_actor)
        self.critic_optimizer = adam(self.critic_params, config.learning_rate_critic)

    def _build_networks(self) -> tuple[nn.Module, nn.Module]:
        actor = MLP(**network_args(self.config, self.info, "actor"))
        critic = MLP(**network_args(self.config, self.info, "critic"))
        return actor, critic

    # -- the pieces MADDPG overrides -----------------------------------------------------------
    def _policy(
        self, obs: torch.Tensor, avail: torch.Tensor, *, target: bool = False
    ) -> torch.Tensor:
        """Actions (B, N, action_dim) as the critic takes them, for observations (B, N, obs_dim)
        (``avail``: the available discrete actions, unused for continuous ones)."""
        actor = self.target_actor if target else self.actor
        return actor(obs)

    def _q(self, obs: torch.Tensor, actions: torch.Tensor, *, target: bool = False) -> torch.Tensor:
        """Q values (B, N) of each agent's (observation, action)."""
        critic = self.target_critic if target else self.critic
        return critic(torch.cat([obs, actions], dim=-1)).squeeze(-1)

    def _batch_actions(self, batch: ReplayBatch) -> torch.Tensor:
        """The stored actions as the critic takes them."""
        return self._tensor(batch.actions)

    def _actor_actions(self, policy: torch.Tensor, stored: torch.Tensor) -> torch.Tensor:
        """What the critic is given in the actor's update, from the live policy's actions and the
        stored ones: DDPG's Q(s, mu(s)) takes the policy's."""
        return policy

    # ------------------------------------------------------------------------------------------
    def _tensor(self, array: NDArray[Any]) -> torch.Tensor:
        return torch.as_tensor(array, device=self.device)

    def _greedy_actions(self, observation: Observation) -> NDArray[np.float32]:
        with torch.no_grad():
            obs, avail = self._tensor(observation.obs), self._tensor(observation.avail_actions)
            return self._policy(obs, avail).cpu().numpy()

    def update(self, batch: ReplayBatch) -> DDPGStats:
        ops, cfg = self.ops, self.config
        obs, next_obs = self._tensor(batch.obs), self._tensor(batch.next_obs)
        avail, next_avail = (
            self._tensor(batch.avail_actions),
            self._tensor(batch.next_avail_actions),
        )
        rewards, mask = self._tensor(batch.rewards), self._tensor(batch.agent_mask)
        terminated = self._tensor(batch.terminated)[:, None]
        with torch.no_grad():
            next_actions = self._policy(next_obs, next_avail, target=True)
            q_next = self._q(next_obs, next_actions, target=True)
        target = td_target(ops, rewards, q_next, terminated, cfg.gamma)

        stored = self._batch_actions(batch)
        q = self._q(obs, stored)
        loss_critic = critic_loss(ops, q, target, mask)
        norm_critic = gradient_step(
            ops, loss_critic, [self.critic_optimizer], self.critic_params, cfg.max_grad_norm
        )
        policy_actions = self._actor_actions(self._policy(obs, avail), stored)
        loss_actor = actor_loss(ops, self._q(obs, policy_actions), mask)
        norm_actor = gradient_step(
            ops, loss_actor, [self.actor_optimizer], self.actor_params, cfg.max_grad_norm
        )
        soft_update(self.target_actor, self.actor, cfg.tau)
        soft_update(self.target_critic, self.critic, cfg.tau)
        self.updates += 1
        return DDPGStats(
            loss_actor=ops.item(loss_actor),
            loss_critic=ops.item(loss_critic),
            q_value=ops.item(q.mean()),
            td_target=ops.item(target.mean()),
            grad_norm_actor=norm_actor,
            grad_norm_critic=norm_critic,
        )
