"""MADDPG in MindSpore (Lowe et al., NeurIPS 2017); the math is ``learners.algorithms.maddpg`` and
DDPG's, and so is the update: this module only changes what the networks see.

The MindSpore twin of ``learners.backends.torch.maddpg.TorchMADDPG``:

- actors see their own (padded) observation, plus a one-hot agent id when parameters are shared;
- critics see every agent's observation and action (flattened), plus the agent id when shared, and
  give each agent its own Q value (B, N);
- agent ids are built from the batch in hand (its real shape), never from the configured batch
  size (seeds defect 6);
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
from mindspore import Tensor, ops
from numpy.typing import NDArray

from learners.algorithms.ddpg import OUTPUT_INIT_SCALE
from learners.algorithms.maddpg import MADDPGConfig, MADDPGLearner
from learners.backends.mindspore.ddpg import OPS, DDPGNets, MindSporeDDPG
from learners.backends.mindspore.networks import MLP, PerAgentMLP
from learners.backends.mindspore.ops import log64, softmax64
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation
from learners.functional.distributions import masked_logits

# torch's clamp bounds for the uniform draw: log(-log(u)) stays finite at both ends.
UNIFORM_LOW, UNIFORM_HIGH = 1e-10, 1.0 - 1e-7


class MADDPGNets(DDPGNets):
    """Decentralised actors, centralised critics."""

    def __init__(self, config: MADDPGConfig, info: EnvInfo, init: np.random.Generator) -> None:
        super().__init__(config, info, init)
        self.discrete = info.action_kind == "discrete"
        self.shared = config.share_parameters
        self.num_agents, self.action_dim = info.num_agents, info.action_dim
        self.temperature = config.gumbel_temperature

    def _build(  # type: ignore[override]
        self, config: MADDPGConfig, info: EnvInfo, init: np.random.Generator, trainable: bool
    ) -> tuple[Any, Any]:
        discrete = info.action_kind == "discrete"
        n, ids = info.num_agents, info.num_agents if config.share_parameters else 0
        actor_in = info.obs_dim + ids
        critic_in = n * (info.obs_dim + info.action_dim) + ids
        actor_kw: dict[str, Any] = {
            "tanh_output": not discrete, "output_scale": OUTPUT_INIT_SCALE,
            "trainable": trainable,
        }  # fmt: skip
        critic_kw: dict[str, Any] = {"output_scale": OUTPUT_INIT_SCALE, "trainable": trainable}
        hidden = config.hidden_sizes
        if config.share_parameters:
            return (
                MLP(actor_in, hidden, info.action_dim, init, **actor_kw),
                MLP(critic_in, hidden, 1, init, **critic_kw),
            )
        return (
            PerAgentMLP(n, actor_in, hidden, info.action_dim, init, **actor_kw),
            PerAgentMLP(n, critic_in, hidden, 1, init, **critic_kw),
        )

    def _with_ids(self, x: Tensor) -> Tensor:
        """``x`` (B, N, F) with each agent's one-hot id appended when parameters are shared."""
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
        critic = self.target_critic if target else self.critic
        batch, n = obs.shape[0], self.num_agents
        joint = ops.cat((ops.reshape(obs, (batch, -1)), ops.reshape(actions, (batch, -1))), -1)
        per_agent = ops.broadcast_to(ops.expand_dims(joint, 1), (batch, n, joint.shape[-1]))
        return ops.squeeze(critic(self._with_ids(per_agent)), -1)

    def batch_actions(self, actions: Tensor) -> Tensor:
        if self.discrete:
            return self._one_hot(actions)
        return actions

    def construct(self, obs: Tensor, avail: Tensor) -> Tensor:
        """The actors' outputs: actions in [-1, 1], or logits (acting masks them on the host)."""
        return self.actor(self._with_ids(obs))


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
