"""Weighted QMIX in TensorFlow (Rashid et al., NeurIPS 2020): OW-QMIX and CW-QMIX, one learner.

The TensorFlow twin of ``learners.backends.torch.wqmix.TorchWQMIX``, network for network and name
for name: the agents' utilities (``agent``), QMIX's monotonic ``mixer``, the central agents
(``central_agent``) and the unrestricted ``central_mixer``, plus target copies of the two central
networks, synchronised every ``target_update_interval`` updates. The weights, the TD target and
both losses come from ``learners.functional.wqmix``: the central loss is a masked mean over
transitions in every backend, and an unknown weighting raises instead of training with uniform
weights (seeds defect 7). Agent ids are built from each batch's real size (seeds defect 6).

The whole update (targets, both losses, the gradient step over every live network with one global
norm, Adam) runs as one ``tf.function``; acting is epsilon-greedy with the draws made on the host
from the same NumPy generator as in every backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import numpy as np
import tensorflow as tf
from numpy.typing import NDArray

from learners import rng
from learners.algorithms.wqmix import WQMIXConfig, WQMIXStats, epsilon_at
from learners.backends.tensorflow.agent_nets import AgentMLP
from learners.backends.tensorflow.networks import (
    MLP,
    Param,
    copy_into,
    load_module,
    module_state,
    variables,
)
from learners.backends.tensorflow.ops import TensorFlowOps
from learners.backends.tensorflow.optim import TorchAdam, gradient_step
from learners.backends.tensorflow.runtime import maybe_compile, tf_device
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation
from learners.functional.distributions import masked_logits
from learners.functional.returns import td_target
from learners.functional.wqmix import is_greedy_joint_action, weights_for, wqmix_loss

Batch = dict[str, tf.Tensor]


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
    """Q*(s, u): an unrestricted MLP of the central utilities of the taken actions and the state."""

    def __init__(
        self, num_agents: int, state_dim: int, hidden: int, init: np.random.Generator,
        trainable: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        self.net = MLP(num_agents + state_dim, [hidden, hidden], 1, init, trainable=trainable)
        self.params = _prefixed("net", self.net)

    def __call__(self, q: tf.Tensor, state: tf.Tensor) -> tf.Tensor:
        return self.net(tf.concat([q, state], axis=-1))[..., 0]


LIVE = ("agent", "mixer", "central_agent", "central_mixer")
TARGETS = ("target_central_agent", "target_central_mixer")


class TensorFlowWQMIX:
    """The TensorFlow WQMIX learner (``learners.runners.off_policy`` drives it)."""

    uses_state = True

    def __init__(self, config: WQMIXConfig, info: EnvInfo, device: str, seed: int) -> None:
        if info.action_kind != "discrete":
            raise ValueError(f"WQMIX needs discrete actions, not {info.action_kind}")
        self.config, self.info = config, info
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
        self.exploration = rng.generator(seed, "exploration")
        self.updates = 0
        self.explore_steps = 0
        self.set_compiled(True)

    def _agent(self, init: np.random.Generator, trainable: bool = True) -> AgentMLP:
        info, cfg = self.info, self.config
        return AgentMLP(
            info.obs_dim, cfg.hidden_sizes, info.action_dim, info.num_agents,
            shared=cfg.share_parameters, activation="relu", rnn_hidden_size=None,
            rng=init, head_gain=1.0, trainable=trainable,
        )  # fmt: skip

    def _central_mixer(self, init: np.random.Generator, trainable: bool) -> CentralMixer:
        info = self.info
        hidden = self.config.central_mixer_hidden
        return CentralMixer(info.num_agents, info.state_dim, hidden, init, trainable)

    def set_compiled(self, compiled: bool) -> None:
        """Run ``update`` and ``act``'s forward pass as ``tf.function`` graphs (the default) or
        eagerly."""
        self.compiled = compiled
        self._train_step = maybe_compile(self._train_step_eager, compiled)
        self._greedy_step = maybe_compile(self._greedy_step_eager, compiled)

    def _tensor(self, x: NDArray[Any]) -> tf.Tensor:
        return self.ops.asarray(x)

    def _utilities(self, name: str, obs: tf.Tensor, avail: tf.Tensor) -> tf.Tensor:
        """Per-agent utilities (B, N, A) of network ``name``, unavailable actions pushed down."""
        q, _ = self.nets[name](obs)
        return masked_logits(self.ops, q, avail)

    def _greedy_step_eager(self, obs: tf.Tensor, avail: tf.Tensor) -> tf.Tensor:
        return tf.argmax(self._utilities("agent", obs, avail), axis=-1)

    def act(self, observation: Observation, *, explore: bool) -> NDArray[Any]:
        """Greedy actions; with ``explore``, each agent acts uniformly at random over its
        available actions with probability epsilon (which decays with the exploring steps)."""
        avail = observation.avail_actions
        greedy = np.asarray(self._greedy_step(self._tensor(observation.obs), self._tensor(avail)))
        if not explore:
            return greedy
        epsilon = epsilon_at(self.config, self.explore_steps)
        self.explore_steps += observation.obs.shape[0]
        with np.errstate(divide="ignore"):
            scores = np.log(avail) + self.exploration.gumbel(size=avail.shape)
        random_actions = np.argmax(scores, axis=-1)
        explore_mask = self.exploration.uniform(size=greedy.shape) < epsilon
        return np.where(explore_mask, random_actions, greedy).astype(np.int64)

    def _targets(self, b: Batch, greedy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """y and Q*_target(s, u^) (for CW); computed outside the tape, so without gradient."""
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
        q_greedy = ops.gather_last(nets["target_central_agent"](b["obs"])[0], greedy)
        q_star_greedy = nets["target_central_mixer"](ops.where(live, q_greedy, 0.0), b["state"])
        return target, q_star_greedy

    def update(self, batch: ReplayBatch) -> WQMIXStats:
        """One gradient step of both losses on ``batch`` (any size: ids come from its shape)."""
        arrays = {f.name: self._tensor(getattr(batch, f.name)) for f in fields(ReplayBatch)}
        out = self._train_step(arrays)
        self.updates += 1
        if self.updates % self.config.target_update_interval == 0:
            self._sync_targets()
        stats = {name: float(value.numpy()) for name, value in out.items()}
        return WQMIXStats(**stats, epsilon=epsilon_at(self.config, self.explore_steps))

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

    def _sync_targets(self) -> None:
        for name in TARGETS:
            copy_into(self.nets[name], self.nets[name.removeprefix("target_")])

    # -- checkpoints ----------------------------------------------------------------------------

    def policy_tensor_names(self) -> list[str]:
        return sorted(module_state("agent", self.nets["agent"]))

    def state(self) -> dict[str, NDArray[Any]]:
        tensors: dict[str, NDArray[Any]] = {}
        for name, net in self.nets.items():
            tensors.update(module_state(name, net))
        for name in LIVE:
            tensors.update(self.optimizers[name].state(name, name))
        tensors["rng/exploration"] = rng.state_tensor(self.exploration)
        tensors["counters/updates"] = np.array(self.updates, np.int64)
        tensors["counters/explore_steps"] = np.array(self.explore_steps, np.int64)
        return tensors

    def load_state(self, tensors: Mapping[str, NDArray[Any]], *, policy_only: bool = False) -> None:
        load_module("agent", self.nets["agent"], tensors)
        if policy_only:
            return
        for name, net in self.nets.items():
            load_module(name, net, tensors)
        for name in LIVE:
            self.optimizers[name].load_state(name, name, tensors)
        rng.restore(self.exploration, tensors["rng/exploration"])
        self.updates = int(tensors["counters/updates"])
        self.explore_steps = int(tensors["counters/explore_steps"])
