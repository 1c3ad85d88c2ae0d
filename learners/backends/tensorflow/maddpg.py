"""MADDPG in TensorFlow (Lowe et al., NeurIPS 2017); the math is ``learners.algorithms.maddpg`` and
DDPG's, and so is the update: this class only changes what the networks see.

The reference library had no TensorFlow MADDPG (reference defect ``missing-tf-ddpg``,
docs/reference-defects.md). This one mirrors ``learners.backends.torch.maddpg.TorchMADDPG``:

- actors see their own (padded) observation, plus a one-hot agent id when parameters are shared
  (within the team: ``PerTeamMLP`` on a scenario with several teams);
- critics see every agent's observation and a joint action (flattened), plus the agent id when
  shared, and give each agent its own Q value (B, N); in the actor's update agent i's critic sees
  its own policy action and the buffer's actions of the others (``learners.functional.maddpg``);
- agent ids are built for the batch in hand (its real size), never for the configured batch size
  (reference defect ``ids-from-config-batch-size``);
- discrete actions: the actor gives logits, the critic takes one-hot actions, the actor's update
  goes through a straight-through Gumbel-softmax sample (one-hot forward, softmax gradient), and
  the target policy is the target actor's greedy one-hot. The sample's uniform noise comes from the
  NumPy generator ``rng/gumbel``, drawn on the host before the compiled step, exactly as the torch
  learner draws it, so both backends make the same update from the same checkpoint.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from numpy.typing import NDArray

from learners.algorithms.ddpg import OUTPUT_INIT_SCALE
from learners.algorithms.maddpg import MADDPGConfig, MADDPGLearner, input_dims, sharing_sets
from learners.backends.tensorflow.ddpg import Batch, TensorFlowDDPG
from learners.backends.tensorflow.networks import MLP, PerAgentMLP, PerTeamMLP
from learners.backends.tensorflow.runtime import maybe_compile
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation
from learners.functional.distributions import masked_logits
from learners.functional.maddpg import actor_joint_actions, own_action_mask, own_actions

# torch's clamp bounds for the uniform draw: log(-log(u)) stays finite at both ends.
UNIFORM_LOW, UNIFORM_HIGH = 1e-10, 1.0 - 1e-7


class TensorFlowMADDPG(MADDPGLearner, TensorFlowDDPG):
    """MADDPG's actors and centralised critics, trained by DDPG's update."""

    config: MADDPGConfig

    def __init__(self, config: MADDPGConfig, info: EnvInfo, device: str, seed: int) -> None:
        super().__init__(config, info, device, seed)
        self._own = self._tensor(own_action_mask(info.num_agents))

    def _build_networks(self, init: np.random.Generator, trainable: bool) -> tuple[Any, Any]:
        info = self.info
        actor_in, critic_in = input_dims(
            info, self.layout, centralised_critic=self.config.centralised_critic
        )
        actor = self._network_for(
            actor_in, info.action_dim, init, tanh_output=not self.discrete, trainable=trainable
        )
        return actor, self._network_for(critic_in, 1, init, trainable=trainable)

    def _network_for(
        self, in_dim: int, out_dim: int, init: np.random.Generator, **kwargs: Any
    ) -> Any:
        """One network for every agent, one per sharing set (team or group), or one per agent
        (``self.layout``)."""
        hidden, kwargs = self.config.hidden_sizes, {**kwargs, "output_scale": OUTPUT_INIT_SCALE}
        if self.layout == "shared":
            return MLP(in_dim, hidden, out_dim, init, **kwargs)
        if self.layout == "teams":
            teams = sharing_sets(self.config, self.info)
            return PerTeamMLP(teams, in_dim, hidden, out_dim, init, **kwargs)
        return PerAgentMLP(self.info.num_agents, in_dim, hidden, out_dim, init, **kwargs)

    def _with_ids(self, x: tf.Tensor) -> tf.Tensor:
        """``x`` (B, N, F) with each agent's one-hot id appended when one network serves all."""
        if self.layout != "shared":
            return x
        n = self.info.num_agents
        ids = tf.broadcast_to(tf.eye(n, dtype=x.dtype), tf.stack([tf.shape(x)[0], n, n]))
        return tf.concat([x, ids], axis=-1)

    def _logits(self, obs: tf.Tensor, avail: tf.Tensor, *, target: bool = False) -> tf.Tensor:
        actor = self.target_actor if target else self.actor
        return masked_logits(self.ops, actor(self._with_ids(obs)), avail)

    def _policy(
        self, obs: tf.Tensor, avail: tf.Tensor, *, target: bool = False, noise: Batch | None = None
    ) -> tf.Tensor:
        if not self.discrete:
            actor = self.target_actor if target else self.actor
            return actor(self._with_ids(obs))
        logits = self._logits(obs, avail, target=target)
        depth = self.info.action_dim
        if target:  # the target policy is deterministic: the greedy one-hot
            return tf.one_hot(tf.argmax(logits, axis=-1), depth, dtype=logits.dtype)
        assert noise is not None, "the actor's update needs its Gumbel draws"
        uniform = tf.clip_by_value(noise["gumbel_uniform"], UNIFORM_LOW, UNIFORM_HIGH)
        gumbel = -tf.math.log(-tf.math.log(uniform))
        soft = tf.nn.softmax((logits + gumbel) / self.config.gumbel_temperature, axis=-1)
        hard = tf.one_hot(tf.argmax(soft, axis=-1), depth, dtype=soft.dtype)
        return hard - tf.stop_gradient(soft) + soft  # one-hot forward, softmax gradient

    def _q(self, obs: tf.Tensor, actions: tf.Tensor, *, target: bool = False) -> tf.Tensor:
        """Each agent's Q (B, N) of the joint observation and a joint action: ``actions`` is one
        joint action (B, N, A) for every critic, or each critic's own (B, N, N, A)."""
        critic = self.target_critic if target else self.critic
        if not self.config.centralised_critic:  # Q_i(o_i, a_i): independent DDPG learners
            if actions.shape.rank == 4:
                actions = own_actions(self.ops, actions, self._own)
            return critic(self._with_ids(tf.concat([obs, actions], -1)))[..., 0]
        batch, n = tf.shape(obs)[0], self.info.num_agents
        if actions.shape.rank == 3:
            actions = tf.broadcast_to(actions[:, None], tf.stack([batch, n, n, actions.shape[-1]]))
        joint_obs = tf.broadcast_to(
            tf.reshape(obs, [batch, 1, -1]), tf.stack([batch, n, n * obs.shape[-1]])
        )
        joint = tf.concat([joint_obs, tf.reshape(actions, [batch, n, -1])], -1)
        return critic(self._with_ids(joint))[..., 0]

    def _actor_actions(self, policy: tf.Tensor, stored: tf.Tensor) -> tf.Tensor:
        """Agent i's critic sees its own policy action and the buffer's for everyone else."""
        return actor_joint_actions(self.ops, policy, stored, self._own)

    def _batch_actions(self, batch: Batch) -> tf.Tensor:
        if self.discrete:
            return tf.one_hot(batch["actions"], self.info.action_dim, dtype=tf.float32)
        return batch["actions"]

    def _update_noise(self, batch: ReplayBatch) -> dict[str, NDArray[Any]]:
        if not self.discrete:
            return {}
        shape = (*batch.obs.shape[:2], self.info.action_dim)
        return {"gumbel_uniform": self.gumbel.random(size=shape, dtype=np.float32)}

    def _logits_step_eager(self, obs: tf.Tensor) -> tf.Tensor:
        return self.actor(self._with_ids(obs))

    def set_compiled(self, compiled: bool) -> None:
        super().set_compiled(compiled)
        self._logits_step = maybe_compile(self._logits_step_eager, compiled)

    def _actor_logits(self, observation: Observation) -> NDArray[np.float32]:
        return np.asarray(self._logits_step(self._tensor(observation.obs)).numpy())
