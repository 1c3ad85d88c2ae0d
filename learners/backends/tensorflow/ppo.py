"""MAPPO and IPPO in TensorFlow (Yu et al., 2022; de Witt et al., 2020): one learner, two configs.

The TensorFlow twin of ``learners.backends.torch.ppo.TorchPPO``: the same networks (from
``agent_nets``), the same math (``learners.functional`` over ``TensorFlowOps``: the critic regresses
onto the GAE returns, never the old values, seeds defect 1; the policy loss is a masked mean over
every (step, agent) entry, as in torch, seeds defect 3), one gradient step per minibatch clipped by
the global norm of all parameters and only when ``max_grad_norm`` is set (never per tensor, never
unconditionally: seeds defect 3), PyTorch's Adam arithmetic, and actions sampled on the host by the
shared ``sample_actions`` from the same NumPy generator, so from the same checkpoint both backends
sample the same actions and make the same updates.

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
    PPOStats,
    learning_rate_at,
    rollout_targets,
    sample_actions,
)
from learners.backends.tensorflow.agent_nets import AgentMLP
from learners.backends.tensorflow.networks import Param, load_module, module_state, variables
from learners.backends.tensorflow.ops import TensorFlowOps
from learners.backends.tensorflow.optim import TorchAdam, gradient_step
from learners.backends.tensorflow.runtime import maybe_compile, tf_device
from learners.buffers.rollout import RolloutBuffer, RolloutStep
from learners.envs.base import EnvInfo, Observation
from learners.functional import distributions as dist
from learners.functional.losses import PPOLoss, entropy_bonus, policy_loss, ppo_loss, value_loss
from learners.functional.normalizer import ValueNormalizer

Memory = tf.Tensor | None
"""The actor's GRU state of the training copies, (E, N, H); None for feed-forward policies."""


class Actor(AgentMLP):
    """The policy network; continuous actions add ``log_std`` ((A,) shared or (N, A))."""

    def __init__(self, config: PPOConfig, info: EnvInfo, init: np.random.Generator) -> None:
        super().__init__(
            info.obs_dim, config.hidden_sizes, info.action_dim, info.num_agents,
            shared=config.share_parameters, activation=config.activation,
            rnn_hidden_size=config.rnn_hidden_size if config.recurrent else None,
            rng=init, head_gain=0.01,
        )  # fmt: skip
        self.log_std: tf.Variable | None = None
        if info.action_kind == "continuous":
            lead = () if config.share_parameters else (info.num_agents,)
            value = np.full((*lead, info.action_dim), config.log_std_init, np.float32)
            self.log_std = tf.Variable(value, name="log_std")
            self.params.append(Param("log_std", self.log_std, transposed=False))


def _critic(config: PPOConfig, info: EnvInfo, init: np.random.Generator) -> AgentMLP:
    inputs = info.state_dim if config.centralised_critic else info.obs_dim
    return AgentMLP(
        inputs, config.hidden_sizes, 1, info.num_agents,
        shared=config.share_parameters, activation=config.activation,
        rnn_hidden_size=config.rnn_hidden_size if config.recurrent else None,
        rng=init, head_gain=1.0,
    )  # fmt: skip


class TensorFlowPPO:
    """The TensorFlow MAPPO/IPPO learner (``learners.runners.on_policy`` drives it)."""

    def __init__(self, config: PPOConfig, info: EnvInfo, device: str, seed: int) -> None:
        self.config, self.info = config, info
        self.device = tf_device(device)
        self.ops = TensorFlowOps(self.device)
        self.discrete = info.action_kind == "discrete"
        init = rng.generator(seed, "init")
        with tf.device(self.device):
            self.actor = Actor(config, info, init)
            self.critic = _critic(config, info, init)
            # One Adam per network (as in torch): the moments keep their network's names.
            self.optimizers = {
                name: TorchAdam(net.params, config.learning_rate, eps=1e-5)
                for name, net in (("actor", self.actor), ("critic", self.critic))
            }
        self.nets: dict[str, AgentMLP] = {"actor": self.actor, "critic": self.critic}
        self.normalizer = ValueNormalizer()
        self.exploration = rng.generator(seed, "exploration")
        self.minibatch_rng = rng.generator(seed, "minibatches")
        self.updates = 0
        self.learning_rate = config.learning_rate
        self._act_memory: Memory = None
        # The critic's GRU state at the start of the next rollout (None: zeros).
        self._critic_start: Memory = None
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

    def initial_memory(self, num_envs: int) -> Memory:
        """The actor's state for ``num_envs`` copies starting new episodes (the critic's too)."""
        self._critic_start = None
        if not self.config.recurrent:
            return None
        shape = (num_envs, self.info.num_agents, self.config.rnn_hidden_size)
        return self.ops.asarray(np.zeros(shape, np.float32))

    def reset_memory(self, memory: Memory, ended: NDArray[np.bool_]) -> Memory:
        """``memory`` with the copies whose episode ended set back to zero."""
        if memory is None or not ended.any():
            return memory
        return memory * self.ops.asarray((~ended).astype(np.float32))[:, None, None]

    def _tensor(self, x: NDArray[Any]) -> tf.Tensor:
        return self.ops.asarray(x)

    def _critic_input(self, obs: tf.Tensor, state: tf.Tensor) -> tf.Tensor:
        if not self.config.centralised_critic:
            return obs
        shape = tf.concat([tf.shape(state)[:-1], [self.info.num_agents], tf.shape(state)[-1:]], 0)
        return tf.broadcast_to(state[..., None, :], shape)

    def _actor_step(self, obs: tf.Tensor, h: Memory) -> tuple[tf.Tensor, Memory]:
        """The actor's output for one step of (E, N, obs); recurrent: and its next state."""
        if h is None:
            return self._actor_forward(obs), None
        out, h_next = self._actor_recurrent_forward(obs, h)
        return out, h_next

    def _actor_forward_eager(self, obs: tf.Tensor) -> tf.Tensor:
        return self.actor(obs)[0]

    def _actor_recurrent_forward_eager(
        self, obs: tf.Tensor, h: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        out, h_next = self.actor(obs[None], h)
        assert h_next is not None
        return out[0], h_next

    def _sample(
        self, out: tf.Tensor, avail: NDArray[np.float32], explore: bool
    ) -> tuple[NDArray[Any], NDArray[np.float32]]:
        """Actions and log-probabilities on the host (``sample_actions``, shared by every backend:
        the same generator gives the same actions from the same outputs)."""
        log_std = None if self.actor.log_std is None else self.actor.log_std.numpy()
        return sample_actions(out.numpy(), avail, log_std, self.exploration, explore)

    def _log_std(self, out: tf.Tensor) -> tf.Tensor:
        assert self.actor.log_std is not None
        return tf.broadcast_to(self.actor.log_std, tf.shape(out))

    def _log_prob(self, out: tf.Tensor, actions: tf.Tensor, avail: tf.Tensor) -> tf.Tensor:
        if self.discrete:
            return dist.categorical_log_prob(self.ops, out, actions, avail)
        return dist.normal_log_prob(self.ops, actions, out, self._log_std(out))

    def _entropy(self, out: tf.Tensor, avail: tf.Tensor) -> tf.Tensor:
        if self.discrete:
            return dist.categorical_entropy(self.ops, out, avail)
        return dist.normal_entropy(self.ops, self._log_std(out))

    def _env_actions(self, actions: NDArray[Any]) -> NDArray[Any]:
        return actions if self.discrete else np.clip(actions, -1.0, 1.0)

    def rollout_step(self, observation: Observation, memory: Memory) -> tuple[RolloutStep, Memory]:
        """Sample actions for every copy and agent with their log-probabilities (one forward
        pass of the actor); the critic values the rollout afterwards, in ``update``."""
        out, memory_next = self._actor_step(self._tensor(observation.obs), memory)
        actions, log_prob = self._sample(out, observation.avail_actions, explore=True)
        step = RolloutStep(
            actions=actions,
            env_actions=self._env_actions(actions),
            log_prob=log_prob,
            hidden=None if memory is None else memory.numpy(),
        )
        return step, memory_next

    def act(self, observation: Observation, *, explore: bool) -> NDArray[Any]:
        """Actions for a batched observation (evaluation, replays); a recurrent policy carries its
        own GRU state between calls (``end_episodes`` clears it)."""
        num_envs = observation.obs.shape[0]
        if self.config.recurrent and (
            self._act_memory is None or self._act_memory.shape[0] != num_envs
        ):
            shape = (num_envs, self.info.num_agents, self.config.rnn_hidden_size)
            self._act_memory = self.ops.asarray(np.zeros(shape, np.float32))
        out, self._act_memory = self._actor_step(self._tensor(observation.obs), self._act_memory)
        actions, _ = self._sample(out, observation.avail_actions, explore)
        return self._env_actions(actions)

    def end_episodes(self, ended: NDArray[np.bool_]) -> None:
        """Forget ``act``'s GRU state for the copies whose episode ended."""
        self._act_memory = self.reset_memory(self._act_memory, ended)

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
            h = self._critic_start
            if h is None or h.shape[0] != buffer.info.num_envs:
                shape = (*buffer.obs.shape[1:-1], self.config.rnn_hidden_size)
                h = t(np.zeros(shape, np.float32))
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

    def lr_decay(self, step: int, total_steps: int) -> float:
        """Set the step size for env step ``step`` of ``total_steps``; returns it."""
        self.learning_rate = learning_rate_at(self.config, step, total_steps)
        for optimizer in self.optimizers.values():
            optimizer.learning_rate.assign(self.learning_rate)
        return self.learning_rate

    def update(self, buffer: RolloutBuffer) -> PPOStats:
        """``epochs`` passes of minibatch PPO over the rollout in ``buffer``."""
        self._value_pass(buffer)
        targets = rollout_targets(self.config, buffer, self.normalizer)
        data = self._rollout_arrays(buffer, targets.advantages, targets.returns)
        totals: dict[str, float] = {}
        count = 0
        for minibatch in self._minibatches(buffer, data):
            terms, grad_norm = self._train_step(minibatch)
            for name, value in terms._asdict().items():
                totals[name] = totals.get(name, 0.0) + float(value.numpy())
            totals["grad_norm"] = totals.get("grad_norm", 0.0) + float(grad_norm.numpy())
            count += 1
        self.updates += 1
        means = {k: v / count for k, v in totals.items()}
        return PPOStats(
            **means, learning_rate=self.learning_rate, explained_variance=targets.explained_variance
        )

    def _rollout_arrays(
        self, buffer: RolloutBuffer, advantages: NDArray[np.float32], returns: NDArray[np.float32]
    ) -> dict[str, NDArray[Any]]:
        data = {
            "obs": buffer.obs,
            "state": buffer.state,
            "avail": buffer.avail_actions,
            "actions": buffer.actions,
            "log_prob_old": buffer.log_prob,
            "values_old": buffer.values,
            "returns": returns,
            "advantages": advantages,
            "mask": buffer.agent_mask,
        }
        if self.config.recurrent:
            data["actor_hidden"] = buffer.actor_hidden
            data["critic_hidden"] = buffer.critic_hidden
        return data

    def _minibatches(
        self, buffer: RolloutBuffer, data: dict[str, NDArray[Any]]
    ) -> Iterator[dict[str, tf.Tensor]]:
        """Shuffled minibatches: of (step, env) rows, or of padded chunks when recurrent. The
        shuffles come from the same generator, in the same order, as in the torch learner."""
        cfg = self.config
        if cfg.recurrent:
            chunks = buffer.chunks(cfg.chunk_length)
            hidden = {k: chunks.first(data.pop(k)) for k in ("actor_hidden", "critic_hidden")}
            # Time first: (L, C, ...); padding is masked through ``filled``.
            seq = {k: np.swapaxes(chunks.gather(v), 0, 1) for k, v in data.items()}
            seq["mask"] = seq["mask"] * chunks.filled.T[..., None]
            rows, axis = len(chunks.env), 1
        else:
            rows, axis = buffer.length * buffer.info.num_envs, 0
            # An explicit row count: ``-1`` cannot be inferred for continuous actions' (T, E, N, 0)
            # ``avail`` array.
            seq = {k: v.reshape(rows, *v.shape[2:]) for k, v in data.items()}
            hidden = {}
        for _ in range(cfg.epochs):
            order = self.minibatch_rng.permutation(rows)
            for part in np.array_split(order, min(cfg.minibatches, rows)):
                minibatch = {k: self._tensor(np.take(v, part, axis=axis)) for k, v in seq.items()}
                minibatch.update({k: self._tensor(v[part]) for k, v in hidden.items()})
                yield minibatch

    def _losses(self, mb: Mapping[str, tf.Tensor]) -> PPOLoss[tf.Tensor]:
        cfg, ops = self.config, self.ops
        out, _ = self.actor(mb["obs"], mb.get("actor_hidden"))
        values, _ = self.critic(self._critic_input(mb["obs"], mb["state"]), mb.get("critic_hidden"))
        log_prob = self._log_prob(out, mb["actions"], mb["avail"])
        policy = policy_loss(
            ops, log_prob, mb["log_prob_old"], mb["advantages"], mb["mask"], cfg.clip_eps
        )
        loss_value = value_loss(
            ops, values[..., 0], mb["values_old"], mb["returns"], mb["mask"],
            cfg.value_clip_eps, cfg.huber_delta,
        )  # fmt: skip
        entropy = entropy_bonus(ops, self._entropy(out, mb["avail"]), mb["mask"])
        return ppo_loss(policy, loss_value, entropy, cfg.value_coef, cfg.entropy_coef)

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

    # -- checkpoints ----------------------------------------------------------------------------

    def policy_tensor_names(self) -> list[str]:
        return sorted(module_state("actor", self.actor))

    def state(self) -> dict[str, NDArray[Any]]:
        """Networks, Adam's moments, the value normaliser, random generators and counters."""
        tensors: dict[str, NDArray[Any]] = {}
        for name, net in self.nets.items():
            tensors.update(module_state(name, net))
            tensors.update(self.optimizers[name].state(name, name))
        tensors["value_norm"] = self.normalizer.state()
        tensors["rng/exploration"] = rng.state_tensor(self.exploration)
        tensors["rng/minibatches"] = rng.state_tensor(self.minibatch_rng)
        tensors["counters/updates"] = np.array(self.updates, np.int64)
        return tensors

    def load_state(self, tensors: Mapping[str, NDArray[Any]], *, policy_only: bool = False) -> None:
        """Restore ``state()``'s tensors (only the actor's with ``policy_only``)."""
        load_module("actor", self.actor, tensors)
        self._act_memory = self._critic_start = None
        if policy_only:
            return
        load_module("critic", self.critic, tensors)
        for name in self.nets:
            self.optimizers[name].load_state(name, name, tensors)
        self.normalizer.load_state(tensors["value_norm"])
        rng.restore(self.exploration, tensors["rng/exploration"])
        rng.restore(self.minibatch_rng, tensors["rng/minibatches"])
        self.updates = int(tensors["counters/updates"])
