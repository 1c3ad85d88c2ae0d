"""MADDPG in MindSpore (Lowe et al., NeurIPS 2017); the math is ``learners.algorithms.maddpg`` and
DDPG's, and so is the update: this module only changes what the networks see.

The MindSpore twin of ``learners.backends.torch.maddpg.TorchMADDPG``:

- actors see their own (padded) observation, plus a one-hot agent id when parameters are shared
  (within the team: ``PerTeamMLP`` on a scenario with several teams);
- critics see every agent's observation and a joint action (flattened), plus the agent id when
  shared, and give each agent its own Q value (B, N); in the actor's update agent i's critic sees
  its own policy action and the buffer's actions of the others (``learners.functional.maddpg``);
- with ``centralised_critic=false`` each critic sees only its agent's own observation and action
  (independent DDPG learners);
- agent ids are built from the batch in hand (its real shape), never from the configured batch
  size (reference defect ``ids-from-config-batch-size``, docs/reference-defects.md);
- discrete actions: the actor gives logits, the critic takes one-hot actions, the actor's update
  goes through a straight-through Gumbel-softmax sample (one-hot forward, softmax gradient), and
  the target policy is the target actor's greedy one-hot. The sample's uniform noise comes from the
  NumPy generator ``rng/gumbel``, drawn on the host before the compiled update, as the torch
  learner draws it, so every backend makes the same update from the same checkpoint.
"""

from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from numpy.typing import NDArray

from learners.algorithms.ddpg import OUTPUT_INIT_SCALE
from learners.algorithms.maddpg import (
    MADDPGConfig,
    MADDPGLearner,
    NetworkLayout,
    input_dims,
    network_layout,
    sharing_sets,
)
from learners.backends.mindspore.ddpg import OPS, DDPGNets, MindSporeDDPG
from learners.backends.mindspore.networks import MLP, PerAgentMLP, PerTeamMLP
from learners.backends.mindspore.ops import log64, softmax64
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation
from learners.functional.distributions import masked_logits
from learners.functional.maddpg import actor_joint_actions, own_action_mask, own_actions

# torch's clamp bounds for the uniform draw: log(-log(u)) stays finite at both ends.
UNIFORM_LOW, UNIFORM_HIGH = 1e-10, 1.0 - 1e-7


class MADDPGNets(DDPGNets):
    """Decentralised actors, centralised critics."""

    def __init__(self, config: MADDPGConfig, info: EnvInfo, init: np.random.Generator) -> None:
        super().__init__(config, info, init)
        self.discrete = info.action_kind == "discrete"
        self.shared = network_layout(config, info) == "shared"
        self.num_agents, self.action_dim = info.num_agents, info.action_dim
        self.temperature = config.gumbel_temperature
        self.own = Tensor(own_action_mask(info.num_agents))
        self.centralised = config.centralised_critic

    def _build(  # type: ignore[override]
        self, config: MADDPGConfig, info: EnvInfo, init: np.random.Generator, trainable: bool
    ) -> tuple[Any, Any]:
        layout = network_layout(config, info)
        actor_in, critic_in = input_dims(info, layout, centralised_critic=config.centralised_critic)
        actor_kw: dict[str, Any] = {
            "tanh_output": info.action_kind != "discrete", "trainable": trainable,
        }  # fmt: skip
        return (
            _network_for(layout, config, info, actor_in, info.action_dim, init, **actor_kw),
            _network_for(layout, config, info, critic_in, 1, init, trainable=trainable),
        )

    def _with_ids(self, x: Tensor) -> Tensor:
        """``x`` (B, N, F) with each agent's one-hot id appended when one network serves all."""
        if not self.shared:
            return x
        n = self.num_agents
        ids = ops.broadcast_to(ops.eye(n, n, ms.float32), (x.shape[0], n, n))
        return ops.cat((x, ids), -1)

    def _one_hot(self, index: Tensor) -> Tensor:
        return ops.one_hot(index, self.action_dim, Tensor(1.0, ms.float32), Tensor(0.0, ms.float32))

    def policy(self, obs: Tensor, avail: Tensor, noise: Tensor, target: bool = False) -> Tensor:
        actor = self.target_actor if target else self.actor
        out = actor(self._with_ids(obs))
        if not self.discrete:
            return out
        logits = masked_logits(OPS, out, avail)
        if target:  # the target policy is deterministic: the greedy one-hot
            return self._one_hot(ops.argmax(logits, -1))
        gumbel = -log64(-log64(ops.clamp(noise, UNIFORM_LOW, UNIFORM_HIGH)))
        soft = softmax64((logits + gumbel) / self.temperature, -1)
        hard = self._one_hot(ops.argmax(soft, -1))
        return hard - ops.stop_gradient(soft) + soft  # one-hot forward, softmax gradient

    def q(self, obs: Tensor, actions: Tensor, target: bool = False) -> Tensor:
        """Each agent's Q (B, N) of the joint observation and a joint action: ``actions`` is one
        joint action (B, N, A) for every critic, or each critic's own (B, N, N, A)."""
        critic = self.target_critic if target else self.critic
        if not self.centralised:  # Q_i(o_i, a_i): independent DDPG learners
            if actions.ndim == 4:
                actions = own_actions(OPS, actions, self.own)
            return ops.squeeze(critic(self._with_ids(ops.cat((obs, actions), -1))), -1)
        batch, n = obs.shape[0], self.num_agents
        if actions.ndim == 3:
            shape = (batch, n, n, actions.shape[-1])
            actions = ops.broadcast_to(ops.expand_dims(actions, 1), shape)
        flat_obs = ops.reshape(obs, (batch, 1, -1))
        joint_obs = ops.broadcast_to(flat_obs, (batch, n, n * obs.shape[-1]))
        joint = ops.cat((joint_obs, ops.reshape(actions, (batch, n, -1))), -1)
        return ops.squeeze(critic(self._with_ids(joint)), -1)

    def actor_actions(self, policy: Tensor, stored: Tensor) -> Tensor:
        """Agent i's critic sees its own policy action and the buffer's for everyone else."""
        return actor_joint_actions(OPS, policy, stored, self.own)

    def batch_actions(self, actions: Tensor) -> Tensor:
        if self.discrete:
            return self._one_hot(actions)
        return actions

    def construct(self, obs: Tensor, avail: Tensor) -> Tensor:
        """The actors' outputs: actions in [-1, 1], or logits (acting masks them on the host)."""
        return self.actor(self._with_ids(obs))


def _network_for(
    layout: NetworkLayout, config: MADDPGConfig, info: EnvInfo, in_dim: int, out_dim: int,
    init: np.random.Generator, **kwargs: Any,
) -> nn.Cell:  # fmt: skip
    """One network for every agent, one per sharing set (team or group), or one per agent
    (``layout``)."""
    hidden, kwargs = config.hidden_sizes, {**kwargs, "output_scale": OUTPUT_INIT_SCALE}
    if layout == "shared":
        return MLP(in_dim, hidden, out_dim, init, **kwargs)
    if layout == "teams":
        return PerTeamMLP(sharing_sets(config, info), in_dim, hidden, out_dim, init, **kwargs)
    return PerAgentMLP(info.num_agents, in_dim, hidden, out_dim, init, **kwargs)


class MindSporeMADDPG(MADDPGLearner, MindSporeDDPG):
    """MADDPG's actors and centralised critics, trained by DDPG's update."""

    config: MADDPGConfig

    def _build_nets(self, init: np.random.Generator) -> DDPGNets:
        return MADDPGNets(self.config, self.info, init)

    def _update_noise(self, batch: ReplayBatch) -> NDArray[np.float32]:
        if not self.discrete:
            return super()._update_noise(batch)
        shape = (*batch.obs.shape[:2], self.info.action_dim)
        return self.gumbel.random(size=shape, dtype=np.float32)

    def _actor_logits(self, observation: Observation) -> NDArray[np.float32]:
        obs, avail = self._tensor(observation.obs), self._input(observation.avail_actions)
        return np.asarray(self._act(obs, avail).asnumpy())
