"""MAPPO and IPPO in TensorFlow (Yu et al., 2022; de Witt et al., 2020): one learner, two configs.

The TensorFlow twin of ``learners.backends.torch.ppo.TorchPPO``: the same networks (from
``agent_nets``), the same math (``learners.functional`` over ``TensorFlowOps``: the critic regresses
onto the GAE returns, never the old values, reference defect ``critic-on-old-values``; the policy
loss is a masked mean over every (step, agent) entry, as in torch, reference defect
``per-tensor-clipping``), one gradient step per minibatch clipped by the global norm of all
parameters and only when ``max_grad_norm`` is set (never per tensor, never unconditionally: the same
defect; docs/reference-defects.md), PyTorch's Adam arithmetic, and actions sampled on the host by
the shared ``sample_actions`` from the same NumPy generator, so from the same checkpoint both
backends sample the same actions and make the same updates. The host side (memory, minibatches,
stats, checkpoint bookkeeping) is the shared ``learners.algorithms.ppo_learner.PPOLearner``.

A minibatch's whole gradient step, the actor's forward pass and the critic's value pass over a
rollout run as ``tf.function`` graphs; ``set_compiled(False)`` runs them eagerly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
from numpy.typing import NDArray

from learners import rng
from learners.algorithms.ppo import (
    PPOConfig,
    agent_specific_state,
    minibatch_loss,
    sample_actions,
)
from learners.algorithms.ppo_learner import (
    HEAD_GAIN,
    PPOLearner,
    TrainingRows,
    initial_log_std,
    network_args,
)
from learners.backends.tensorflow.agent_nets import AgentMLP
from learners.backends.tensorflow.networks import (
    Param,
    TensorFlowState,
    variables,
)
from learners.backends.tensorflow.ops import TensorFlowOps
from learners.backends.tensorflow.optim import TorchAdam, gradient_step
from learners.backends.tensorflow.runtime import maybe_compile, tf_device
from learners.buffers.rollout import RolloutBuffer
from learners.envs.base import EnvInfo, Observation
from learners.functional import distributions as dist
from learners.functional.losses import PPOLoss

Memory = tf.Tensor | None
"""The actor's GRU state of the training copies, (E, N, H); None for feed-forward policies."""


class Actor(AgentMLP):
    """The policy network; continuous actions add ``log_std`` ((A,) shared, (T, A) per team or
    (N, A) per agent)."""

    def __init__(self, config: PPOConfig, info: EnvInfo, init: np.random.Generator) -> None:
        super().__init__(
            **network_args(config, info, "actor"), rng=init, head_gain=HEAD_GAIN["actor"]
        )
        log_std = initial_log_std(config, info)
        self.log_std: tf.Variable | None = None
        if log_std is not None:
            self.log_std = tf.Variable(log_std, name="log_std")
            self.params.append(Param("log_std", self.log_std, transposed=False))

    def agent_log_std(self) -> tf.Tensor:
        """The log std as the agents use it: (A,) shared, else (N, A)."""
        assert self.log_std is not None
        team = self.head.groups  # each agent's team, when each team has its own kernels
        return self.log_std if team is None else tf.gather(self.log_std, team)


class TensorFlowPPO(TensorFlowState, PPOLearner[tf.Tensor]):
    """The TensorFlow MAPPO/IPPO learner (``learners.runners.on_policy`` drives it)."""

    def __init__(self, config: PPOConfig, info: EnvInfo, device: str, seed: int) -> None:
        super().__init__(config, info, seed)
        self.device = tf_device(device)
        self.ops = TensorFlowOps(self.device)
        init = rng.generator(seed, "init")
        with tf.device(self.device):
            self.actor = Actor(config, info, init)
            self.critic = AgentMLP(
                **network_args(config, info, "critic"), rng=init, head_gain=HEAD_GAIN["critic"]
            )
            # One Adam per network (as in torch): the moments keep their network's names.
            self.optimizers = {
                name: TorchAdam(net.params, config.learning_rate, eps=1e-5)
                for name, net in (("actor", self.actor), ("critic", self.critic))
            }
        self.nets: dict[str, AgentMLP] = {"actor": self.actor, "critic": self.critic}
        self.set_compiled(True)

    def set_compiled(self, compiled: bool) -> None:
        """Run the minibatch step and the acting forward pass as ``tf.function`` graphs (the
        default) or eagerly."""
        self.compiled = compiled
        self._train_step = maybe_compile(self._train_step_eager, compiled)
        self._actor_forward = maybe_compile(self._actor_forward_eager, compiled)
        self._actor_recurrent_forward = maybe_compile(self._actor_recurrent_forward_eager, compiled)
        self._values_step = maybe_compile(self._values_step_eager, compiled)
        self._recurrent_values_step = maybe_compile(self._recurrent_values_step_eager, compiled)

    # -- acting -------------------------------------------------------------------------------

    def _tensor(self, x: NDArray[Any]) -> tf.Tensor:
        return self.ops.asarray(x)

    def _critic_input(self, obs: tf.Tensor, state: tf.Tensor) -> tf.Tensor:
        if not self.config.centralised_critic:
            return obs
        shape = tf.concat([tf.shape(state)[:-1], [self.info.num_agents], tf.shape(state)[-1:]], 0)
        state = tf.broadcast_to(state[..., None, :], shape)
        if agent_specific_state(self.config):
            return tf.concat([state, obs], axis=-1)
        return state

    def _policy_step(
        self, observation: Observation, memory: Memory, explore: bool
    ) -> tuple[NDArray[Any], NDArray[np.float32], Memory]:
        """The actor's compiled forward pass; the actions are sampled on the host
        (``sample_actions``, shared by every backend: the same generator gives the same actions
        from the same outputs)."""
        obs = self._tensor(observation.obs)
        if memory is None:
            out, memory_next = self._actor_forward(obs), None
        else:
            out, memory_next = self._actor_recurrent_forward(obs, memory)
        log_std = None if self.actor.log_std is None else self.actor.agent_log_std().numpy()
        actions, log_prob = sample_actions(
            out.numpy(), observation.avail_actions, log_std, self.exploration, explore
        )
        return actions, log_prob, memory_next

    def _actor_forward_eager(self, obs: tf.Tensor) -> tf.Tensor:
        return self.actor(obs)[0]

    def _actor_recurrent_forward_eager(
        self, obs: tf.Tensor, h: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        out, h_next = self.actor(obs[None], h)
        assert h_next is not None
        return out[0], h_next

    def _log_std(self, out: tf.Tensor) -> tf.Tensor:
        return tf.broadcast_to(self.actor.agent_log_std(), tf.shape(out))

    def _log_prob(self, out: tf.Tensor, actions: tf.Tensor, avail: tf.Tensor) -> tf.Tensor:
        if self.discrete:
            return dist.categorical_log_prob(self.ops, out, actions, avail)
        return dist.normal_log_prob(self.ops, actions, out, self._log_std(out))

    def _entropy(self, out: tf.Tensor, avail: tf.Tensor) -> tf.Tensor:
        if self.discrete:
            return dist.categorical_entropy(self.ops, out, avail)
        return dist.normal_entropy(self.ops, self._log_std(out))

    def _value_pass(self, buffer: RolloutBuffer) -> None:
        """Value every observation of the rollout (each step's, each ended episode's final one,
        and the one after the last step) in one batched pass, and store them in ``buffer``."""
        t = self._tensor
        inputs = [
            t(buffer.obs), t(buffer.state), t(buffer.final_obs), t(buffer.final_state),
            t(buffer.last_obs), t(buffer.last_state),
        ]  # fmt: skip
        if self.critic.gru is None:
            values, final, last = self._values_step(*inputs)
        else:
            h = self._critic_memory(buffer.info.num_envs)
            ended = t(buffer.episode_end.astype(np.float32))
            values, final, last, before, self._critic_start = self._recurrent_values_step(
                *inputs, ended, h
            )
            buffer.critic_hidden[...] = before.numpy()
        buffer.set_values(values.numpy(), final.numpy(), last.numpy())

    def _values_step_eager(self, *inputs: tf.Tensor) -> tuple[tf.Tensor, ...]:
        pairs = zip(inputs[::2], inputs[1::2], strict=True)
        return tuple(self.critic(self._critic_input(o, s))[0][..., 0] for o, s in pairs)

    def _recurrent_values_step_eager(
        self, obs: tf.Tensor, state: tf.Tensor, final_obs: tf.Tensor, final_state: tf.Tensor,
        last_obs: tf.Tensor, last_state: tf.Tensor, ended: tf.Tensor, h: tf.Tensor,
    ) -> tuple[tf.Tensor, ...]:  # fmt: skip
        critic = self.critic
        assert critic.gru is not None
        starts = tf.concat([tf.zeros_like(ended[:1]), ended[:-1]], 0)
        after, before = critic.recur(critic.encode(self._critic_input(obs, state)), h, starts)
        values = critic.decode(after)
        # The final observation follows the state after its step; the next rollout starts from
        # the state after the last step, reset where that step ended an episode.
        final_x = critic.gru.input(critic.encode(self._critic_input(final_obs, final_state)))
        final = critic.decode(critic.gru(final_x, after))
        start = after[-1] * (1.0 - ended[-1])[:, None, None]
        last_x = critic.gru.input(critic.encode(self._critic_input(last_obs, last_state)))
        last = critic.decode(critic.gru(last_x, start))
        return values[..., 0], final[..., 0], last[..., 0], before, start

    # -- learning -----------------------------------------------------------------------------

    def _set_learning_rate(self, learning_rate: float) -> None:
        for optimizer in self.optimizers.values():
            optimizer.learning_rate.assign(learning_rate)

    def _train(self, rows: TrainingRows, minibatches: Iterator[NDArray[np.int64]]) -> NDArray[Any]:
        terms = []
        for part in minibatches:
            minibatch = {k: self._tensor(v) for k, v in rows.take(part).items()}
            loss_terms, grad_norm = self._train_step(minibatch)
            terms.append([*(float(t.numpy()) for t in loss_terms), float(grad_norm.numpy())])
        return np.array(terms, np.float64)

    def _losses(self, mb: Mapping[str, tf.Tensor]) -> PPOLoss[tf.Tensor]:
        out, _ = self.actor(mb["obs"], mb.get("actor_hidden"))
        values, _ = self.critic(self._critic_input(mb["obs"], mb["state"]), mb.get("critic_hidden"))
        return minibatch_loss(
            self.ops, self.config, mb, out, values[..., 0], self._log_prob, self._entropy
        )

    def _train_step_eager(
        self, minibatch: Mapping[str, tf.Tensor]
    ) -> tuple[PPOLoss[tf.Tensor], tf.Tensor]:
        """One gradient step on the combined loss, clipped by the global norm of all parameters."""
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(variables(self.actor) + variables(self.critic))
            terms = self._losses(minibatch)
        optimizers = [self.optimizers["actor"], self.optimizers["critic"]]
        norm = gradient_step(self.ops, tape, terms.loss, optimizers, self.config.max_grad_norm)
        return terms, norm
