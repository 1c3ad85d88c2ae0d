"""MADDPG in PyTorch (Lowe et al., NeurIPS 2017); the math is ``learners.algorithms.maddpg`` and
DDPG's, and so is the update: this class only changes what the networks see.

- Actors see their own (padded) observation, plus a one-hot agent id when parameters are shared
  (within the team: ``PerTeamMLP`` on a scenario with several teams).
- Critics see every agent's observation and a joint action (flattened), plus the agent id when
  shared, and give each agent its own Q value: (B, N). In the actor's update agent i's critic
  sees its own policy action and the buffer's actions of the others
  (``learners.functional.maddpg``).
- With ``centralised_critic=false`` each critic sees only its agent's own observation and action
  (independent DDPG learners).
- Agent ids are built for the batch in hand (``obs.shape[0]``), never for the configured batch size
  (the reference did the latter, so a smaller batch crashed: reference defect
  ``ids-from-config-batch-size``).
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
from learners.algorithms.maddpg import MADDPGConfig, MADDPGLearner, input_dims, sharing_sets
from learners.backends.torch.ddpg import TorchDDPG
from learners.backends.torch.networks import MLP, PerAgentMLP, PerTeamMLP
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation
from learners.functional.distributions import masked_logits
from learners.functional.maddpg import actor_joint_actions, own_action_mask, own_actions


class TorchMADDPG(MADDPGLearner, TorchDDPG):
    """MADDPG's actors and centralised critics, trained by DDPG's update."""

    config: MADDPGConfig

    def __init__(self, config: MADDPGConfig, info: EnvInfo, device: str, seed: int) -> None:
        super().__init__(config, info, device, seed)
        self._own = self._tensor(own_action_mask(info.num_agents))

    def _build_networks(self) -> tuple[nn.Module, nn.Module]:
        info = self.info
        actor_in, critic_in = input_dims(
            info, self.layout, centralised_critic=self.config.centralised_critic
        )
        return (
            self._network_for(actor_in, info.action_dim, tanh_output=not self.discrete),
            self._network_for(critic_in, 1),
        )

    def _network_for(self, in_dim: int, out_dim: int, **kwargs: Any) -> nn.Module:
        """One network for every agent, one per sharing set (team or group), or one per agent
        (``self.layout``)."""
        hidden, kwargs = self.config.hidden_sizes, {**kwargs, "output_scale": OUTPUT_INIT_SCALE}
        if self.layout == "shared":
            return MLP(in_dim, hidden, out_dim, **kwargs)
        if self.layout == "teams":
            sets = sharing_sets(self.config, self.info)
            return PerTeamMLP(sets, in_dim, hidden, out_dim, **kwargs)
        return PerAgentMLP(self.info.num_agents, in_dim, hidden, out_dim, **kwargs)

    def _with_ids(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (B, N, F) with each agent's one-hot id appended when one network serves all."""
        if self.layout != "shared":
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
        """Each agent's Q (B, N) of the joint observation and a joint action: ``actions`` is one
        joint action (B, N, A) for every critic, or each critic's own (B, N, N, A)."""
        critic = self.target_critic if target else self.critic
        if not self.config.centralised_critic:  # Q_i(o_i, a_i): independent DDPG learners
            if actions.dim() == 4:
                actions = own_actions(self.ops, actions, self._own)
            return critic(self._with_ids(torch.cat([obs, actions], dim=-1))).squeeze(-1)
        batch, n = obs.shape[0], self.info.num_agents
        if actions.dim() == 3:
            actions = actions.unsqueeze(1).expand(batch, n, n, actions.shape[-1])
        joint_obs = obs.reshape(batch, 1, -1).expand(batch, n, -1)
        joint = torch.cat([joint_obs, actions.reshape(batch, n, -1)], dim=-1)
        return critic(self._with_ids(joint)).squeeze(-1)

    def _actor_actions(self, policy: torch.Tensor, stored: torch.Tensor) -> torch.Tensor:
        """Agent i's critic sees its own policy action and the buffer's for everyone else."""
        return actor_joint_actions(self.ops, policy, stored, self._own)

    def _batch_actions(self, batch: ReplayBatch) -> torch.Tensor:
        actions = self._tensor(batch.actions)
        if self.discrete:
            return F.one_hot(actions, self.info.action_dim).to(torch.float32)
        return actions

    def _actor_logits(self, observation: Observation) -> NDArray[np.float32]:
        with torch.no_grad():
            return self.actor(self._with_ids(self._tensor(observation.obs))).cpu().numpy()
