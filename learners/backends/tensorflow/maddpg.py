"""MADDPG in TensorFlow (Lowe et al., NeurIPS 2017); the math is ``learners.algorithms.maddpg`` and
DDPG's, and so is the update: this class only changes what the networks see.

The reference library had no TensorFlow MADDPG (seeds defect 9). This one mirrors
``learners.backends.torch.maddpg.TorchMADDPG``:

- actors see their own (padded) observation, plus a one-hot agent id when parameters are shared;
- critics see every agent's observation and action (flattened), plus the agent id when shared, and
  give each agent its own Q value (B, N);
- agent ids are built for the batch in hand (its real size), never for the configured batch size
  (seeds defect 6);
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
from learners.algorithms.maddpg import MADDPGConfig, MADDPGLearner
from learners.backends.tensorflow.ddpg import Batch, TensorFlowDDPG
from learners.backends.tensorflow.networks import MLP, PerAgentMLP
from learners.backends.tensorflow.runtime import maybe_compile
from learners.buffers.replay import ReplayBatch
from learners.envs.base import Observation
from learners.functional.distributions import masked_logits

# torch's clamp bounds for the uniform draw: log(-log(u)) stays finite at both ends.
UNIFORM_LOW, UNIFORM_HIGH = 1e-10, 1.0 - 1e-7


class TensorFlowMADDPG(MADDPGLearner, TensorFlowDDPG):
    """MADDPG's actors and centralised critics, trained by DDPG's update."""

    config: MADDPGConfig

    def _build_networks(self, init: np.random.Generator, trainable: bool) -> tuple[Any, Any]:
        info, cfg = self.info, self.config
        n, ids = info.num_agents, info.num_agents if cfg.share_parameters else 0
        actor_in = info.obs_dim + ids
        critic_in = n * (info.obs_dim + info.action_dim) + ids
        actor_kw: dict[str, Any] = {
            "tanh_output": not self.discrete,
            "output_scale": OUTPUT_INIT_SCALE,
            "trainable": trainable,
        }
        critic_kw: dict[str, Any] = {"output_scale": OUTPUT_INIT_SCALE, "trainable": trainable}
        if cfg.share_parameters:
            return (
                MLP(actor_in, cfg.hidden_sizes, info.action_dim, init, **actor_kw),
                MLP(critic_in, cfg.hidden_sizes, 1, init, **critic_kw),
            )
        return (
            PerAgentMLP(n, actor_in, cfg.hidden_sizes, info.action_dim, init, **actor_kw),
            PerAgentMLP(n, critic_in, cfg.hidden_sizes, 1, init, **critic_kw),
        )

    def _with_ids(self, x: tf.Tensor) -> tf.Tensor:
        """``x`` (B, N, F) with each agent's one-hot id appended when parameters are shared."""
        if not self.config.share_parameters:
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
        critic = self.target_critic if target else self.critic
        batch, n = tf.shape(obs)[0], self.info.num_agents
        joint = tf.concat([tf.reshape(obs, [batch, -1]), tf.reshape(actions, [batch, -1])], -1)
        per_agent = tf.broadcast_to(joint[:, None, :], tf.stack([batch, n, tf.shape(joint)[-1]]))
        return critic(self._with_ids(per_agent))[..., 0]

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
