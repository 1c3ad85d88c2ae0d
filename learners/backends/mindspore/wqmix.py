"""Weighted QMIX in MindSpore (Rashid et al., NeurIPS 2020): OW-QMIX and CW-QMIX, one learner.

The MindSpore twin of ``learners.backends.torch.wqmix.TorchWQMIX``, network for network and name
for name: the agents' utilities (``agent``), QMIX's monotonic ``mixer``, the central agents
(``central_agent``) and the unrestricted ``central_mixer``, plus target copies of the two central
networks, synchronised every ``target_update_interval`` updates. The weights, the TD target and
both losses come from ``learners.functional`` (the losses through their graph-safe form in
``learners.backends.mindspore.losses``): the central loss is a masked mean over transitions, as in
every backend (the reference's MindSpore copy divided a sum by the agent-mask sum), and an unknown
weighting raises instead of training with uniform weights (reference defect
``wqmix-weighting-and-central-loss``, docs/reference-defects.md). Agent ids are built from each
batch's real shape (reference defect ``ids-from-config-batch-size``).

The whole update (targets, both losses, one global-norm clip over every live network, Adam) is one
compiled cell; acting is epsilon-greedy with the draws made on the host from the same NumPy
generator, in the same order, as in every backend.

With ``recurrent`` the three agent networks carry a GRU (``AgentMLP(rnn_hidden_size=...)``,
checkpoint names ``agent.gru.input.weight``...) and ``update`` takes whole episodes
(``EpisodeBatch``, arranged time-first by the shared ``episode_inputs``): ``RecurrentWQMIXLoss``
unrolls each network over the episodes from a zero hidden state inside the compiled graph
(``AgentMLP.unroll``; the loop over time is unrolled at compile time, so a graph is compiled once
per episode length and batch size: one for training, whose episodes are padded to the env's limit
and sampled ``episode_batch_size`` at a time), exactly as torch's ``_update_episodes``. Acting
carries the hidden state: ``explore_step`` from the memory the off-policy runner keeps per copy,
``act`` from its own (cleared by ``end_episodes``).
"""

from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from numpy.typing import NDArray

from learners import rng
from learners.algorithms.wqmix import WQMIXConfig, agent_seats, episode_inputs
from learners.algorithms.wqmix_learner import LIVE, TARGETS, WQMIXLearner
from learners.backends.mindspore.agent_nets import AgentMLP
from learners.backends.mindspore.losses import wqmix_terms
from learners.backends.mindspore.networks import (
    MLP,
    MindSporeState,
    copy_into,
    named_parameters,
    parameters,
)
from learners.backends.mindspore.ops import MindSporeOps, elu64
from learners.backends.mindspore.optim import TorchAdam, clip_flat, flatten
from learners.buffers.episodes import EpisodeBatch
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation
from learners.functional.distributions import masked_logits
from learners.functional.losses import masked_mean
from learners.functional.returns import td_target
from learners.functional.wqmix import is_greedy_joint_action, weights_for

OPS = MindSporeOps()
STATS = ("loss", "loss_qmix", "loss_central", "weight_mean", "q_tot_mean", "target_mean",
         "grad_norm")  # fmt: skip
# The update's batch inputs, in ``WQMIXUpdate.construct``'s order.
_FIELDS = ("obs", "state", "actions", "rewards", "next_obs", "next_state", "terminated",
           "agent_mask", "avail_actions", "next_avail_actions")  # fmt: skip
# The recurrent update's inputs (``EpisodeInputs`` fields), in ``RecurrentWQMIXLoss``'s order.
_EPISODE_FIELDS = ("obs", "state", "avail_actions", "actions", "agent_mask", "team_reward",
                   "terminated", "mask")  # fmt: skip

Memory = Tensor | None
"""The QMIX agents' GRU state of a set of env copies, (E, N, H); None for feed-forward agents."""


class QMixer(nn.Cell):
    """Q_tot = w2 . elu(q W1 + b1) + V(s), with W1 = |hyper_w1(s)| and w2 = |hyper_w2(s)|: every
    partial derivative dQ_tot/dq_i is non-negative, so the agents' own argmaxes are Q_tot's."""

    def __init__(
        self, num_agents: int, state_dim: int, embed: int, hyper_hidden: int,
        init: np.random.Generator,
    ) -> None:  # fmt: skip
        super().__init__()
        self.num_agents, self.embed = num_agents, embed
        self.hyper_w1 = MLP(state_dim, [hyper_hidden], num_agents * embed, init)
        self.hyper_b1 = MLP(state_dim, [], embed, init)
        self.hyper_w2 = MLP(state_dim, [hyper_hidden], embed, init)
        self.value = MLP(state_dim, [embed], 1, init)

    def construct(self, q: Tensor, state: Tensor) -> Tensor:
        """``q`` (..., N) utilities of the taken actions, ``state`` (..., S) -> Q_tot (...)."""
        shape = state.shape[:-1] + (self.num_agents, self.embed)
        w1 = ops.reshape(ops.abs(self.hyper_w1(state)), shape)
        hidden = elu64(ops.sum(ops.expand_dims(q, -1) * w1, -2) + self.hyper_b1(state))
        w2 = ops.abs(self.hyper_w2(state))
        return ops.sum(hidden * w2, -1) + ops.squeeze(self.value(state), -1)


class CentralMixer(nn.Cell):
    """Q*(s, u): an unrestricted MLP of the central utilities of the taken actions and the state,
    plus a state value V(s) when ``config.central_mixer_value``."""

    def __init__(
        self, num_agents: int, state_dim: int, config: WQMIXConfig, init: np.random.Generator
    ) -> None:
        super().__init__()
        hidden = [config.central_mixer_hidden] * config.central_mixer_layers
        self.net = MLP(num_agents + state_dim, hidden, 1, init)
        self.has_value = config.central_mixer_value
        if self.has_value:
            self.value = MLP(state_dim, [config.central_mixer_hidden], 1, init)

    def construct(self, q: Tensor, state: Tensor) -> Tensor:
        q_star = ops.squeeze(self.net(ops.cat((q, state), -1)), -1)
        if self.has_value:
            q_star = q_star + ops.squeeze(self.value(state), -1)
        return q_star


class WQMIXNets(nn.Cell):
    """Every network, built in the TensorFlow learner's order (one seed, one set of weights)."""

    def __init__(self, config: WQMIXConfig, info: EnvInfo, init: np.random.Generator) -> None:
        super().__init__()
        n, s = info.num_agents, info.state_dim
        self.agent = self._agent(config, info, init)
        self.mixer = QMixer(n, s, config.mixing_embed_dim, config.hypernet_hidden, init)
        self.central_agent = self._agent(config, info, init)
        self.central_mixer = CentralMixer(n, s, config, init)
        self.target_central_agent = self._agent(config, info, init)
        self.target_central_mixer = CentralMixer(n, s, config, init)
        for name in TARGETS:
            for param in parameters(getattr(self, name)):
                param.requires_grad = False

    @staticmethod
    def _agent(config: WQMIXConfig, info: EnvInfo, init: np.random.Generator) -> AgentMLP:
        return AgentMLP(
            info.obs_dim, config.hidden_sizes, info.action_dim, info.num_agents,
            shared=config.share_parameters, seats=agent_seats(config, info), activation="relu",
            rnn_hidden_size=config.rnn_hidden_size if config.recurrent else None,
            rng=init, head_gain=1.0,
        )  # fmt: skip

    def utilities(self, agent: AgentMLP, obs: Tensor, avail: Tensor) -> Tensor:
        """Per-agent utilities (B, N, A), unavailable actions pushed down."""
        return masked_logits(OPS, agent(obs, obs)[0], avail)

    def construct(self, obs: Tensor, avail: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        """The greedy actions (acting) of (E, N, ...) inputs and the agents' state after the step
        (a feed-forward agent passes ``h`` through untouched)."""
        if self.agent.recurrent:
            h = self.agent.gru_step(self.agent.encode(obs), h)
            return ops.argmax(masked_logits(OPS, self.agent.decode(h), avail), -1), h
        return ops.argmax(self.utilities(self.agent, obs, avail), -1), h


class WQMIXLoss(nn.Cell):
    """Both losses of one batch; the other stats ride along as auxiliary outputs."""

    def __init__(self, nets: WQMIXNets, config: WQMIXConfig) -> None:
        super().__init__()
        self.nets = nets
        self.gamma, self.weighting, self.alpha = config.gamma, config.weighting, config.alpha

    def _targets(self, b: tuple[Tensor, ...], greedy: Tensor) -> tuple[Tensor, Tensor | None]:
        """y and, for CW (the only weighting that reads it), Q*_target(s, u^), without gradient.
        The weighting is a constant of the cell, so a compiled OW graph never holds the second
        target pass."""
        obs, state, _, rewards, next_obs, next_state, terminated, mask, _, next_avail = b
        nets, live = self.nets, mask > 0.5
        greedy_next = ops.argmax(nets.utilities(nets.agent, next_obs, next_avail), -1)
        q_next = OPS.gather_last(nets.target_central_agent(next_obs, next_obs)[0], greedy_next)
        q_star_next = nets.target_central_mixer(OPS.where(live, q_next, 0.0), next_state)
        team_reward = ops.sum(rewards * mask, -1) / ops.clamp(ops.sum(mask, -1), min=1.0)
        target = td_target(OPS, team_reward, q_star_next, terminated, self.gamma)
        if self.weighting != "cw":
            return target, None
        q_greedy = OPS.gather_last(nets.target_central_agent(obs, obs)[0], greedy)
        q_star_greedy = nets.target_central_mixer(OPS.where(live, q_greedy, 0.0), state)
        return target, ops.stop_gradient(q_star_greedy)

    def construct(self, *b: Tensor) -> tuple[Tensor, tuple[Tensor, ...]]:
        obs, state, actions, _, _, _, _, mask, avail, _ = b
        nets, live = self.nets, mask > 0.5
        q = nets.utilities(nets.agent, obs, avail)
        greedy = ops.argmax(ops.stop_gradient(q), -1)
        target, q_star_greedy = self._targets(b, greedy)
        q_tot = nets.mixer(OPS.where(live, OPS.gather_last(q, actions), 0.0), state)
        q_central = OPS.gather_last(nets.central_agent(obs, obs)[0], actions)
        q_star = nets.central_mixer(OPS.where(live, q_central, 0.0), state)
        weights = weights_for(
            OPS, self.weighting, td_error=ops.stop_gradient(q_tot) - target,
            is_greedy=is_greedy_joint_action(OPS, actions, greedy, mask),
            target=target, q_central_greedy=q_star_greedy, alpha=self.alpha,
        )  # fmt: skip
        transitions = OPS.max(mask, axis=-1)  # rows with at least one live agent
        loss, loss_qmix, loss_central, weight_mean = wqmix_terms(
            OPS, q_tot, q_star, target, weights, transitions
        )
        aux = (loss_qmix, loss_central, weight_mean, ops.mean(q_tot), ops.mean(target))
        return loss, ops.stop_gradient(ops.stack(aux))


class RecurrentWQMIXLoss(nn.Cell):
    """Both losses of a batch of whole episodes (time first: T steps, T+1 observations, B
    episodes, both read from the inputs' shapes); torch's ``_update_episodes`` op for op. Step t's
    target bootstraps from the target central networks at the live agents' greedy actions of step
    t + 1; the losses and the means are masked by ``mask`` (real steps with a live agent)."""

    def __init__(self, nets: WQMIXNets, config: WQMIXConfig) -> None:
        super().__init__()
        self.nets = nets
        self.gamma, self.weighting, self.alpha = config.gamma, config.weighting, config.alpha
        self.hidden_size = config.rnn_hidden_size

    def _unroll(self, agent: AgentMLP, obs: Tensor) -> Tensor:
        """``agent``'s utilities (L, B, N, A) over ``obs`` (L, B, N, D) from a zero state."""
        h = ops.zeros((obs.shape[1], obs.shape[2], self.hidden_size), ms.float32)
        return agent.unroll(obs, h)[0]

    def _targets(
        self, obs: Tensor, state: Tensor, live: Tensor, greedy_all: Tensor, team_reward: Tensor,
        terminated: Tensor,
    ) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        """y and, for CW only, Q*_target(s, u^), without gradient."""
        nets = self.nets
        q_target = ops.stop_gradient(self._unroll(nets.target_central_agent, obs))
        q_next = OPS.where(live, OPS.gather_last(q_target[1:], greedy_all[1:]), 0.0)
        q_star_next = nets.target_central_mixer(q_next, state[1:])
        target = td_target(OPS, team_reward, q_star_next, terminated, self.gamma)
        if self.weighting != "cw":
            return target, None
        q_greedy = OPS.where(live, OPS.gather_last(q_target[:-1], greedy_all[:-1]), 0.0)
        q_star_greedy = nets.target_central_mixer(q_greedy, state[:-1])
        return target, ops.stop_gradient(q_star_greedy)

    def construct(
        self, obs: Tensor, state: Tensor, avail: Tensor, actions: Tensor, agent_mask: Tensor,
        team_reward: Tensor, terminated: Tensor, mask: Tensor,
    ) -> tuple[Tensor, Tensor]:  # fmt: skip
        nets, live = self.nets, agent_mask > 0.5
        q_all = masked_logits(OPS, self._unroll(nets.agent, obs), avail)
        greedy_all = ops.argmax(ops.stop_gradient(q_all), -1)  # (T+1, B, N)
        greedy = greedy_all[:-1]
        target, q_star_greedy = self._targets(obs, state, live, greedy_all, team_reward, terminated)
        state_now = state[:-1]
        q_tot = nets.mixer(OPS.where(live, OPS.gather_last(q_all[:-1], actions), 0.0), state_now)
        q_central = OPS.gather_last(self._unroll(nets.central_agent, obs[:-1]), actions)
        q_star = nets.central_mixer(OPS.where(live, q_central, 0.0), state_now)
        weights = weights_for(
            OPS, self.weighting, td_error=ops.stop_gradient(q_tot) - target,
            is_greedy=is_greedy_joint_action(OPS, actions, greedy, agent_mask),
            target=target, q_central_greedy=q_star_greedy, alpha=self.alpha,
        )  # fmt: skip
        loss, loss_qmix, loss_central, weight_mean = wqmix_terms(
            OPS, q_tot, q_star, target, weights, mask
        )
        q_tot_mean = masked_mean(OPS, ops.stop_gradient(q_tot), mask)
        aux = (loss_qmix, loss_central, weight_mean, q_tot_mean, masked_mean(OPS, target, mask))
        return loss, ops.stop_gradient(ops.stack(aux))


class WQMIXUpdate(nn.Cell):
    """One gradient step of both losses (``loss``: transitions or episodes) over every live
    network (one global norm), then Adam; returns ``STATS`` stacked."""

    def __init__(
        self, loss: nn.Cell, optimizers: dict[str, TorchAdam], config: WQMIXConfig
    ) -> None:
        super().__init__()
        self.optims = nn.CellList([optimizers[name] for name in LIVE])
        self.sizes = tuple(optimizers[name].size for name in LIVE)
        self.max_grad_norm = config.max_grad_norm
        weights = ms.ParameterTuple([p for name in LIVE for p in optimizers[name].params])
        self.grad = ms.value_and_grad(loss, None, weights, has_aux=True)

    def construct(self, hypers: Tensor, *batch: Tensor) -> Tensor:
        (loss, aux), grads = self.grad(*batch)
        clipped, norm = clip_flat(flatten(grads), self.max_grad_norm)
        start = 0
        for i in range(len(self.sizes)):
            end = start + self.sizes[i]
            self.optims[i](clipped[start:end], hypers[i])
            start = end
        return ops.cat((ops.expand_dims(loss, 0), aux, ops.expand_dims(norm, 0)))


class MindSporeWQMIX(MindSporeState, WQMIXLearner[Tensor]):
    """The MindSpore WQMIX learner (``learners.runners.off_policy`` drives it)."""

    def __init__(self, config: WQMIXConfig, info: EnvInfo, device: str, seed: int) -> None:
        super().__init__(config, info, seed)
        self.device = device
        self.ops = OPS
        self.nets = WQMIXNets(config, info, rng.generator(seed, "init"))
        self._sync_targets()
        self.optimizers = {name: self._adam(getattr(self.nets, name)) for name in LIVE}
        loss = (RecurrentWQMIXLoss if config.recurrent else WQMIXLoss)(self.nets, config)
        self._update_cell = WQMIXUpdate(loss, self.optimizers, config)
        self.set_compiled(True)

    def _adam(self, net: nn.Cell) -> TorchAdam:
        named = named_parameters(net)
        lr = self.config.learning_rate
        return TorchAdam([p for _, p in named], [n for n, _ in named], lr)

    def set_compiled(self, compiled: bool) -> None:
        """Run ``update`` and the greedy forward pass as compiled graphs (the default) or
        eagerly."""
        self.compiled = compiled
        self._update = ms.jit(self._update_cell) if compiled else self._update_cell
        self._greedy = ms.jit(self.nets) if compiled else self.nets

    def _tensor(self, x: NDArray[Any]) -> Tensor:
        return self.ops.asarray(x)

    # -- acting -------------------------------------------------------------------------------

    def _zero_memory(self, num_envs: int) -> Tensor:
        shape = (num_envs, self.info.num_agents, self.config.rnn_hidden_size)
        return self._tensor(np.zeros(shape, np.float32))

    def _keep_memory(self, memory: Tensor, keep: NDArray[np.float32]) -> Tensor:
        return memory * self._tensor(keep[:, None, None])

    def _greedy_actions(
        self, observation: Observation, memory: Memory
    ) -> tuple[NDArray[Any], Memory]:
        """One compiled call; a feed-forward agent gets its observation as a placeholder state."""
        obs, avail = self._tensor(observation.obs), self._tensor(observation.avail_actions)
        greedy, h = self._greedy(obs, avail, obs if memory is None else memory)
        return np.asarray(greedy.asnumpy()), None if memory is None else h

    # -- learning -----------------------------------------------------------------------------

    def _transition_update(self, batch: ReplayBatch) -> dict[str, float]:
        return self._step([self._tensor(getattr(batch, name)) for name in _FIELDS])

    def _episode_update(self, batch: EpisodeBatch) -> dict[str, float]:
        inputs = episode_inputs(batch)
        return self._step([self._tensor(getattr(inputs, name)) for name in _EPISODE_FIELDS])

    def _step(self, arrays: list[Tensor]) -> dict[str, float]:
        """The compiled update on ``arrays`` with each Adam's next step sizes; the stats."""
        hypers = ops.stack([self.optimizers[name].next_hyper() for name in LIVE])
        out = self._update(hypers, *arrays).asnumpy()
        return {name: float(v) for name, v in zip(STATS, out, strict=True)}

    def _sync_targets(self) -> None:
        for name in TARGETS:
            copy_into(getattr(self.nets, name), getattr(self.nets, name.removeprefix("target_")))

    def _network(self, name: str) -> nn.Cell:
        return getattr(self.nets, name)
