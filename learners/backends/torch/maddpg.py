"""MADDPG in PyTorch (Lowe et al., NeurIPS 2017); the math is ``learners.algorithms.maddpg`` and
DDPG's, and so is the update: this class only changes what the networks see.

- Actors see their own (padded) observation, plus a one-hot agent id when parameters are shared.
- Critics see every agent's observation and action (flattened), plus the agent id when shared, and
  give each agent its own Q value: (B, N).
- Agent ids are built for the batch in hand (``obs.shape[0]``), never for the configured batch size
  (the reference did the latter, so a smaller batch crashed: seeds defect 6).
- Discrete actions: the actor gives logits; the critic takes one-hot actions; the actor's update
  differentiates through a straight-through Gumbel-softmax sample whose uniform noise comes from a
  NumPy generator checkpointed as ``rng/gumbel``: resumed runs draw the same noise, and so does
  every other backend's MADDPG from the same checkpoint (a torch generator's stream cannot be
  reproduced outside torch).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from torch import nn

from learners.algorithms.ddpg import OUTPUT_INIT_SCALE
from learners.algorithms.maddpg import MADDPGConfig, MADDPGLearner
from learners.backends.torch.ddpg import TorchDDPG
from learners.backends.torch.networks import MLP, PerAgentMLP
from learners.buffers.replay import ReplayBatch
from learners.envs.base import Observation
from learners.functional.distributions import masked_logits


class TorchMADDPG(MADDPGLearner, TorchDDPG):
    """MADDPG's actors and centralised critics, trained by DDPG's update."""

    config: MADDPGConfig

    def _build_networks(self) -> tuple[nn.Module, nn.Module]:
        info, cfg = self.info, self.config
        n, ids = info.num_agents, info.num_agents if cfg.share_parameters else 0
        actor_in = info.obs_dim + ids
        critic_in = n * (info.obs_dim + info.action_dim) + ids
        actor_kw: dict[str, Any] = {
            "tanh_output": not self.discrete,
            "output_scale": OUTPUT_INIT_SCALE,
        }
        critic_kw: dict[str, Any] = {"output_scale": OUTPUT_INIT_SCALE}
        if cfg.share_parameters:
            return (
                MLP(actor_in, cfg.hidden_sizes, info.action_dim, **actor_kw),
                MLP(critic_in, cfg.hidden_sizes, 1, **critic_kw),
            )
        return (
            PerAgentMLP(n, actor_in, cfg.hidden_sizes, info.action_dim, **actor_kw),
            PerAgentMLP(n, critic_in, cfg.hidden_sizes, 1, **critic_kw),
        )

    def _with_ids(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (B, N, F) with each agent's one-hot id appended when parameters are shared."""
        if not self.config.share_parameters:
            return x
        batch, n = x.shape[0], self.info.num_agents
        ids = torch.eye(n, device=x.device, dtype=x.dtype).expand(batch, n, n)
        return torch.cat([x, ids], dim=-1)

    def _logits(
        self, obs: torch.Tensor, avail: torch.Tensor, *, target: bool = False
    ) -> torch.Tensor:
        actor = self.target_actor if target else self.actor
        return masked_logits(self.ops, actor(self._with_ids(obs)), avail)

    def _policy(
        self, obs: torch.Tensor, avail: torch.Tensor, *, target: bool = False
    ) -> torch.Tensor:
        if not self.discrete:
            actor = self.target_actor if target else self.actor
            return actor(self._with_ids(obs))
        logits = self._logits(obs, avail, target=target)
        if target:  # the target policy is deterministic: the greedy one-hot
            return F.one_hot(logits.argmax(-1), self.info.action_dim).to(logits.dtype)
        uniform = self._tensor(self.gumbel.random(size=tuple(logits.shape), dtype=np.float32))
        gumbel = -torch.log(-torch.log(uniform.clamp(1e-10, 1.0 - 1e-7)))
        soft = torch.softmax((logits + gumbel) / self.config.gumbel_temperature, dim=-1)
        hard = F.one_hot(soft.argmax(-1), self.info.action_dim).to(soft.dtype)
        return hard - soft.detach() + soft  # one-hot forward, softmax gradient

    def _q(self, obs: torch.Tensor, actions: torch.Tensor, *, target: bool = False) -> torch.Tensor:
        critic = self.target_critic if target else self.critic
        batch, n = obs.shape[0], self.info.num_agents
        joint = torch.cat([obs.reshape(batch, -1), actions.reshape(batch, -1)], dim=-1)
        per_agent = joint.unsqueeze(1).expand(batch, n, joint.shape[-1])
        return critic(self._with_ids(per_agent)).squeeze(-1)

    def _batch_actions(self, batch: ReplayBatch) -> torch.Tensor:
        actions = self._tensor(batch.actions)
        if self.discrete:
            return F.one_hot(actions, self.info.action_dim).to(torch.float32)
        return actions

    def _actor_logits(self, observation: Observation) -> NDArray[np.float32]:
        with torch.no_grad():
            return self.actor(self._with_ids(self._tensor(observation.obs))).cpu().numpy()
