"""Weighted QMIX in TensorFlow (Rashid et al., NeurIPS 2020): OW-QMIX and CW-QMIX, one learner.

The TensorFlow twin of ``learners.backends.torch.wqmix.TorchWQMIX``, network for network and name
for name: the agents' utilities (``agent``), QMIX's monotonic ``mixer``, the central agents
(``central_agent``) and the unrestricted ``central_mixer``, plus target copies of the two central
networks, synchronised every ``target_update_interval`` updates. The weights, the TD target and
both losses come from ``learners.functional.wqmix``: the central loss is a masked mean over
transitions in every backend, and an unknown weighting raises instead of training with uniform
weights (reference defect ``wqmix-weighting-and-central-loss``, docs/reference-defects.md). Agent
ids are built from each batch's real size (reference defect ``ids-from-config-batch-size``).

With ``recurrent`` the three agent networks carry the GRU of ``agent_nets.AgentMLP`` (checkpoint
names ``agent.gru.input.weight``...) and ``update`` takes whole episodes (``EpisodeBatch``, arranged
time first by the shared ``episode_inputs``): each network is unrolled over the T+1 observations
of every episode from a zero hidden state (a ``tf.scan`` over time; every agent and episode at once
in each step), the mixers are applied per step, and step t's target bootstraps from the target
central networks at the live agents' greedy actions of step t+1. T and B come from the batch.
Acting carries the hidden state: ``explore_step`` from the memory the off-policy runner keeps per
copy, ``act`` from its own (cleared by ``end_episodes``).

The whole update (targets, both losses, the gradient step over every live network with one global
norm, Adam) runs as one ``tf.function``, as does the agents' forward pass for acting; acting is
epsilon-greedy with the draws made on the host by the shared ``epsilon_greedy``, from the same
NumPy generator as in every backend (``learners.algorithms.wqmix_learner.WQMIXLearner``: the host
side, written once).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import numpy as np
import tensorflow as tf
from numpy.typing import NDArray

from learners import rng
from learners.algorithms.wqmix import WQMIXConfig, agent_seats, episode_inputs
from learners.algorithms.wqmix_learner import LIVE, TARGETS, WQMIXLearner
from learners.backends.tensorflow.agent_nets import AgentMLP
from learners.backends.tensorflow.networks import (
    MLP,
    Param,
    TensorFlowState,
    copy_into,
    variables,
)
from learners.backends.tensorflow.ops import TensorFlowOps
from learners.backends.tensorflow.optim import TorchAdam, gradient_step
from learners.backends.tensorflow.runtime import maybe_compile, tf_device
from learners.buffers.episodes import EpisodeBatch
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation
from learners.functional.distributions import masked_logits
from learners.functional.losses import masked_mean
from learners.functional.returns import td_target
from learners.functional.wqmix import is_greedy_joint_action, weights_for, wqmix_loss

Batch = dict[str, tf.Tensor]
Memory = tf.Tensor | None
"""The QMIX agents' GRU state of a set of env copies, (E, N, H); None for feed-forward agents."""


def _prefixed(prefix: str, net: Any) -> list[Param]:
    return [Param(f"{prefix}.{p.name}", p.variable, p.transposed) for p in net.params]


class QMixer(tf.Module):
    """Q_tot = w2 . elu(q W1 + b1) + V(s), with W1 = |hyper_w1(s)| and w2 = |hyper_w2(s)|: every
    partial derivative dQ_tot/dq_i is non-negative, so the agents' own argmaxes are Q_tot's."""

    def __init__(
        self, num_agents: int, state_dim: int, embed: int, hyper_hidden: int,
        init: np.random.Generator, trainable: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        self.num_agents, self.embed = num_agents, embed
        kw: dict[str, Any] = {"trainable": trainable}
        self.hyper_w1 = MLP(state_dim, [hyper_hidden], num_agents * embed, init, **kw)
        self.hyper_b1 = MLP(state_dim, [], embed, init, **kw)
        self.hyper_w2 = MLP(state_dim, [hyper_hidden], embed, init, **kw)
        self.value = MLP(state_dim, [embed], 1, init, **kw)
        self.params = [
            p
            for name in ("hyper_w1", "hyper_b1", "hyper_w2", "value")
            for p in _prefixed(name, getattr(self, name))
        ]

    def __call__(self, q: tf.Tensor, state: tf.Tensor) -> tf.Tensor:
        """``q`` (..., N) utilities of the taken actions, ``state`` (..., S) -> Q_tot (...)."""
        shape = tf.concat([tf.shape(state)[:-1], [self.num_agents, self.embed]], 0)
        w1 = tf.reshape(tf.abs(self.hyper_w1(state)), shape)
        hidden = tf.nn.elu(tf.reduce_sum(q[..., None] * w1, axis=-2) + self.hyper_b1(state))
        w2 = tf.abs(self.hyper_w2(state))
        return tf.reduce_sum(hidden * w2, axis=-1) + self.value(state)[..., 0]


class CentralMixer(tf.Module):
    """Q*(s, u): an unrestricted MLP of the central utilities of the taken actions and the state,
    plus a state value V(s) when ``config.central_mixer_value``."""

    def __init__(
        self, num_agents: int, state_dim: int, config: WQMIXConfig, init: np.random.Generator,
        trainable: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        hidden = [config.central_mixer_hidden] * config.central_mixer_layers
        self.net = MLP(num_agents + state_dim, hidden, 1, init, trainable=trainable)
        self.params = _prefixed("net", self.net)
        self.value: MLP | None = None
        if config.central_mixer_value:
            width = [config.central_mixer_hidden]
            self.value = MLP(state_dim, width, 1, init, trainable=trainable)
            self.params += _prefixed("value", self.value)

    def __call__(self, q: tf.Tensor, state: tf.Tensor) -> tf.Tensor:
        q_star = self.net(tf.concat([q, state], axis=-1))[..., 0]
        return q_star if self.value is None else q_star + self.value(state)[..., 0]


class TensorFlowWQMIX(TensorFlowState, WQMIXLearner[tf.Tensor]):
    """The TensorFlow WQMIX learner (``learners.runners.off_policy`` drives it)."""

    def __init__(self, config: WQMIXConfig, info: EnvInfo, device: str, seed: int) -> None:
        super().__init__(config, info, seed)
        self.device = tf_device(device)
        self.ops = TensorFlowOps(self.device)
        init = rng.generator(seed, "init")
        with tf.device(self.device):
            self.nets: dict[str, Any] = {
                "agent": self._agent(init),
                "mixer": QMixer(
                    info.num_agents,
                    info.state_dim,
                    config.mixing_embed_dim,
                    config.hypernet_hidden,
                    init,
                ),  # fmt: skip
                "central_agent": self._agent(init),
                "central_mixer": self._central_mixer(init, trainable=True),
                "target_central_agent": self._agent(init, trainable=False),
                "target_central_mixer": self._central_mixer(init, trainable=False),
            }
            self._sync_targets()
            self.optimizers = {
                name: TorchAdam(self.nets[name].params, config.learning_rate) for name in LIVE
            }
        self.set_compiled(True)

    def _agent(self, init: np.random.Generator, trainable: bool = True) -> AgentMLP:
        info, cfg = self.info, self.config
        return AgentMLP(
            info.obs_dim, cfg.hidden_sizes, info.action_dim, info.num_agents,
            shared=cfg.share_parameters, seats=agent_seats(cfg, info), activation="relu",
            rnn_hidden_size=cfg.rnn_hidden_size if cfg.recurrent else None,
            rng=init, head_gain=1.0, trainable=trainable,
        )  # fmt: skip

    def _central_mixer(self, init: np.random.Generator, trainable: bool) -> CentralMixer:
        info = self.info
        return CentralMixer(info.num_agents, info.state_dim, self.config, init, trainable)

    def set_compiled(self, compiled: bool) -> None:
        """Run ``update`` and ``act``'s forward pass as ``tf.function`` graphs (the default) or
        eagerly."""
        self.compiled = compiled
        self._train_step = maybe_compile(self._train_step_eager, compiled)
        self._episode_step = self._episode_step_eager
        if compiled:
            # T and B left open in the signature: one graph for every episode length and batch
            # size (``maybe_compile``'s retracing would trace up to three, one for the first
            # shape, then T and B in turn; each trace of the default config costs 4 to 6 s).
            # AutoGraph off, as in ``maybe_compile``.
            spec = [self._episode_signature()]
            self._episode_step = tf.function(
                self._episode_step_eager, autograph=False, input_signature=spec
            )
        self._greedy_step = maybe_compile(self._greedy_step_eager, compiled)
        self._recurrent_greedy_step = maybe_compile(self._recurrent_greedy_step_eager, compiled)

    def _tensor(self, x: NDArray[Any]) -> tf.Tensor:
        return self.ops.asarray(x)

    def _utilities(self, name: str, obs: tf.Tensor, avail: tf.Tensor) -> tf.Tensor:
        """Per-agent utilities (B, N, A) of network ``name``, unavailable actions pushed down."""
        q, _ = self.nets[name](obs)
        return masked_logits(self.ops, q, avail)

    # -- acting -------------------------------------------------------------------------------

    def _greedy_step_eager(self, obs: tf.Tensor, avail: tf.Tensor) -> tf.Tensor:
        return tf.argmax(self._utilities("agent", obs, avail), axis=-1)

    def _recurrent_greedy_step_eager(
        self, obs: tf.Tensor, avail: tf.Tensor, h: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        q, h = self.nets["agent"].step(obs, h)
        return tf.argmax(masked_logits(self.ops, q, avail), axis=-1), h

    def _zero_memory(self, num_envs: int) -> tf.Tensor:
        shape = (num_envs, self.info.num_agents, self.config.rnn_hidden_size)
        with tf.device(self.device):
            return tf.zeros(shape, tf.float32)

    def _keep_memory(self, memory: tf.Tensor, keep: NDArray[np.float32]) -> tf.Tensor:
        return memory * self._tensor(keep[:, None, None])

    def _greedy_actions(
        self, observation: Observation, memory: Memory
    ) -> tuple[NDArray[Any], Memory]:
        obs, avail = self._tensor(observation.obs), self._tensor(observation.avail_actions)
        if memory is None:
            return np.asarray(self._greedy_step(obs, avail)), None
        greedy, memory = self._recurrent_greedy_step(obs, avail, memory)
        return np.asarray(greedy), memory

    # -- learning -----------------------------------------------------------------------------

    def _targets(self, b: Batch, greedy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor | None]:
        """y and, for CW (the only weighting that reads it), Q*_target(s, u^); computed outside
        the tape, so without gradient. The weighting is a Python constant, so an OW graph never
        holds the second target pass."""
        ops, nets = self.ops, self.nets
        live = b["agent_mask"] > 0.5
        greedy_next = tf.argmax(
            self._utilities("agent", b["next_obs"], b["next_avail_actions"]), -1
        )
        q_next = ops.gather_last(nets["target_central_agent"](b["next_obs"])[0], greedy_next)
        q_star_next = nets["target_central_mixer"](ops.where(live, q_next, 0.0), b["next_state"])
        mask = b["agent_mask"]
        team_reward = tf.reduce_sum(b["rewards"] * mask, -1) / tf.maximum(
            tf.reduce_sum(mask, -1), 1.0
        )
        target = td_target(ops, team_reward, q_star_next, b["terminated"], self.config.gamma)
        if self.config.weighting != "cw":
            return target, None
        q_greedy = ops.gather_last(nets["target_central_agent"](b["obs"])[0], greedy)
        q_star_greedy = nets["target_central_mixer"](ops.where(live, q_greedy, 0.0), b["state"])
        return target, q_star_greedy

    def _transition_update(self, batch: ReplayBatch) -> dict[str, float]:
        fed = {f.name: self._tensor(getattr(batch, f.name)) for f in fields(ReplayBatch)}
        return _floats(self._train_step(fed))

    def _episode_update(self, batch: EpisodeBatch) -> dict[str, float]:
        episodes = vars(episode_inputs(batch))
        return _floats(self._episode_step({k: self._tensor(v) for k, v in episodes.items()}))

    def _train_step_eager(self, b: Batch) -> dict[str, tf.Tensor]:
        ops, nets, cfg = self.ops, self.nets, self.config
        live = b["agent_mask"] > 0.5
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch([v for name in LIVE for v in variables(nets[name])])
            q = self._utilities("agent", b["obs"], b["avail_actions"])
            greedy = tf.argmax(tf.stop_gradient(q), axis=-1)
            with tape.stop_recording():
                target, q_star_greedy = self._targets(b, greedy)
            q_taken = ops.where(live, ops.gather_last(q, b["actions"]), 0.0)
            q_tot = nets["mixer"](q_taken, b["state"])
            q_central = ops.gather_last(nets["central_agent"](b["obs"])[0], b["actions"])
            q_star = nets["central_mixer"](ops.where(live, q_central, 0.0), b["state"])
            weights = weights_for(
                ops, cfg.weighting, td_error=tf.stop_gradient(q_tot) - target,
                is_greedy=is_greedy_joint_action(ops, b["actions"], greedy, b["agent_mask"]),
                target=target, q_central_greedy=q_star_greedy, alpha=cfg.alpha,
            )  # fmt: skip
            transitions = ops.max(b["agent_mask"], axis=-1)  # rows with a live agent
            terms = wqmix_loss(ops, q_tot, q_star, target, weights, transitions)
        optimizers = [self.optimizers[name] for name in LIVE]
        grad_norm = gradient_step(ops, tape, terms.loss, optimizers, cfg.max_grad_norm)
        return {
            "loss": terms.loss, "loss_qmix": terms.loss_qmix,
            "loss_central": terms.loss_central, "weight_mean": terms.weight_mean,
            "q_tot_mean": tf.reduce_mean(q_tot), "target_mean": tf.reduce_mean(target),
            "grad_norm": grad_norm,
        }  # fmt: skip

    def _episode_signature(self) -> dict[str, tf.TensorSpec]:
        """``EpisodeInputs``' fields as tensors, time and batch axes (T or T+1, B) of any size."""
        info = self.info
        n = info.num_agents
        tails: dict[str, tuple[int, ...]] = {
            "obs": (n, info.obs_dim), "state": (info.state_dim,),
            "avail_actions": (n, info.action_dim), "actions": (n,), "agent_mask": (n,),
            "team_reward": (), "terminated": (), "mask": (),
        }  # fmt: skip
        return {
            name: tf.TensorSpec((None, None, *tail), tf.int64 if name == "actions" else tf.float32)
            for name, tail in tails.items()
        }

    def _unroll(self, name: str, obs: tf.Tensor) -> tf.Tensor:
        """Network ``name``'s utilities (L, B, N, A) over time-first episodes ``obs`` (L, B, N,
        D), from a zero hidden state at each episode's first step."""
        shape = tf.concat([tf.shape(obs)[1:3], [self.config.rnn_hidden_size]], 0)
        q, _ = self.nets[name].unroll(obs, tf.zeros(shape, obs.dtype))
        return q

    def _episode_targets(
        self, b: Batch, greedy: tf.Tensor, greedy_next: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor | None]:
        """y (T, B) and, for CW only, Q*_target(s_t, u^_t) from the target central networks
        unrolled over all T+1 steps; computed outside the tape, so without gradient."""
        ops, nets = self.ops, self.nets
        live = b["agent_mask"] > 0.5
        q_target = self._unroll("target_central_agent", b["obs"])
        q_next = ops.where(live, ops.gather_last(q_target[1:], greedy_next), 0.0)
        q_star_next = nets["target_central_mixer"](q_next, b["state"][1:])
        target = td_target(ops, b["team_reward"], q_star_next, b["terminated"], self.config.gamma)
        if self.config.weighting != "cw":
            return target, None
        q_greedy = ops.where(live, ops.gather_last(q_target[:-1], greedy), 0.0)
        return target, nets["target_central_mixer"](q_greedy, b["state"][:-1])

    def _episode_step_eager(self, b: Batch) -> dict[str, tf.Tensor]:
        """One gradient step on whole episodes: step t's target bootstraps from step t + 1 (the
        observation an episode ended on, at its last step); padding is masked out."""
        ops, nets, cfg = self.ops, self.nets, self.config
        live, state, mask = b["agent_mask"] > 0.5, b["state"][:-1], b["mask"]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch([v for name in LIVE for v in variables(nets[name])])
            q_all = masked_logits(ops, self._unroll("agent", b["obs"]), b["avail_actions"])
            greedy_all = tf.argmax(tf.stop_gradient(q_all), axis=-1)  # (T+1, B, N)
            greedy = greedy_all[:-1]
            with tape.stop_recording():
                target, q_star_greedy = self._episode_targets(b, greedy, greedy_all[1:])
            q_taken = ops.where(live, ops.gather_last(q_all[:-1], b["actions"]), 0.0)
            q_tot = nets["mixer"](q_taken, state)
            q_central = self._unroll("central_agent", b["obs"][:-1])
            q_central = ops.gather_last(q_central, b["actions"])
            q_star = nets["central_mixer"](ops.where(live, q_central, 0.0), state)
            weights = weights_for(
                ops, cfg.weighting, td_error=tf.stop_gradient(q_tot) - target,
                is_greedy=is_greedy_joint_action(ops, b["actions"], greedy, b["agent_mask"]),
                target=target, q_central_greedy=q_star_greedy, alpha=cfg.alpha,
            )  # fmt: skip
            terms = wqmix_loss(ops, q_tot, q_star, target, weights, mask)
        optimizers = [self.optimizers[name] for name in LIVE]
        grad_norm = gradient_step(ops, tape, terms.loss, optimizers, cfg.max_grad_norm)
        return {
            "loss": terms.loss, "loss_qmix": terms.loss_qmix,
            "loss_central": terms.loss_central, "weight_mean": terms.weight_mean,
            "q_tot_mean": masked_mean(ops, tf.stop_gradient(q_tot), mask),
            "target_mean": masked_mean(ops, target, mask), "grad_norm": grad_norm,
        }  # fmt: skip

    def _sync_targets(self) -> None:
        for name in TARGETS:
            copy_into(self.nets[name], self.nets[name.removeprefix("target_")])


def _floats(out: Mapping[str, tf.Tensor]) -> dict[str, float]:
    return {name: float(value.numpy()) for name, value in out.items()}
