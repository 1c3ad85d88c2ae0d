"""Weighted QMIX in PyTorch (Rashid et al., NeurIPS 2020): OW-QMIX and CW-QMIX, one learner.

Networks: the agents' utilities Q_i (``agent``, shared with one-hot ids or per agent), QMIX's
monotonic ``mixer`` (hypernetworks of the state give non-negative mixing weights), the central
agents' utilities (``central_agent``) and the unrestricted feed-forward ``central_mixer`` that
gives Q*(s, u) from the central utilities of the taken actions and the state, plus target copies of
the two central networks. The weights, the TD target and both losses come from
``learners.functional``, the host side (epsilon-greedy exploration, acting memory, counters, target
sync, checkpoint layout) from ``learners.algorithms.wqmix_learner.WQMIXLearner``; this module
supplies the networks, the greedy forward pass and the gradient step. Agent ids are built from each
batch's real size (reference defect ``ids-from-config-batch-size``, docs/reference-defects.md).

With ``recurrent`` the three agent networks carry a GRU after their first hidden layer
(``AgentMLP(rnn_hidden_size=...)``, checkpoint names ``agent.gru.input.weight``...) and ``update``
takes whole episodes (``EpisodeBatch``): each network is unrolled over the T+1 observations of
every episode from a zero hidden state (one batched call per network; the loop over time is
inside the GRU), the mixers are applied per step, and the target of step t bootstraps from the
target central networks at the live agents' greedy actions of step t+1. Losses are masked means
over the real steps with a live agent. Acting carries the hidden state: ``explore_step`` from the
memory the off-policy runner keeps per copy, ``act`` from its own (cleared by ``end_episodes``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from learners.algorithms.wqmix import WQMIXConfig, agent_seats, episode_inputs
from learners.algorithms.wqmix_learner import LIVE, TARGETS, WQMIXLearner
from learners.backends.torch.agent_nets import AgentMLP
from learners.backends.torch.networks import (
    MLP,
    TorchState,
    adam,
    gradient_step,
    seeded_init,
)
from learners.backends.torch.ops import TorchOps
from learners.buffers.episodes import EpisodeBatch
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation
from learners.functional.distributions import masked_logits
from learners.functional.losses import masked_mean
from learners.functional.returns import td_target
from learners.functional.wqmix import is_greedy_joint_action, weights_for, wqmix_loss


class QMixer(nn.Module):
    """Q_tot = w2 . elu(q W1 + b1) + V(s), with W1 = |hyper_w1(s)| and w2 = |hyper_w2(s)|: every
    partial derivative dQ_tot/dq_i is non-negative, so the agents' own argmaxes are Q_tot's."""

    def __init__(self, num_agents: int, state_dim: int, embed: int, hyper_hidden: int) -> None:
        super().__init__()
        self.num_agents, self.embed = num_agents, embed
        self.hyper_w1 = MLP(state_dim, [hyper_hidden], num_agents * embed)
        self.hyper_b1 = MLP(state_dim, [], embed)
        self.hyper_w2 = MLP(state_dim, [hyper_hidden], embed)
        self.value = MLP(state_dim, [embed], 1)

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``q`` (..., N) utilities of the taken actions, ``state`` (..., S) -> Q_tot (...)."""
        w1 = torch.abs(self.hyper_w1(state)).view(*state.shape[:-1], self.num_agents, self.embed)
        hidden = nn.functional.elu((q.unsqueeze(-1) * w1).sum(-2) + self.hyper_b1(state))
        w2 = torch.abs(self.hyper_w2(state))
        return (hidden * w2).sum(-1) + self.value(state)[..., 0]


class CentralMixer(nn.Module):
    """Q*(s, u): an unrestricted MLP of the central utilities of the taken actions and the state,
    plus a state value V(s) when ``config.central_mixer_value``."""

    def __init__(self, num_agents: int, state_dim: int, config: WQMIXConfig) -> None:
        super().__init__()
        hidden = config.central_mixer_hidden
        self.net = MLP(num_agents + state_dim, [hidden] * config.central_mixer_layers, 1)
        self.value = MLP(state_dim, [hidden], 1) if config.central_mixer_value else None

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        q_star = self.net(torch.cat([q, state], dim=-1))[..., 0]
        return q_star if self.value is None else q_star + self.value(state)[..., 0]


Memory = torch.Tensor | None
"""The QMIX agents' GRU state of a set of env copies, (E, N, H); None for feed-forward agents."""


class TorchWQMIX(TorchState, WQMIXLearner[torch.Tensor]):
    """The PyTorch WQMIX learner (``learners.runners.off_policy`` drives it)."""

    def __init__(self, config: WQMIXConfig, info: EnvInfo, device: str, seed: int) -> None:
        super().__init__(config, info, seed)
        self.device = torch.device(device)
        if self.device.type == "cpu":
            torch.set_num_threads(1)  # small networks: one thread is fastest (see TorchPPO)
        self.ops = TorchOps(self.device)
        n, a = info.num_agents, info.action_dim
        generator = torch.Generator().manual_seed(seed)
        with seeded_init(seed):
            agents = [
                AgentMLP(
                    info.obs_dim,
                    config.hidden_sizes,
                    a,
                    n,
                    shared=config.share_parameters,
                    seats=agent_seats(config, info),
                    activation="relu",
                    rnn_hidden_size=config.rnn_hidden_size if config.recurrent else None,
                )  # fmt: skip
                for _ in range(2)
            ]
            for agent in agents:
                agent.reset_parameters(generator, head_gain=1.0)
            mixer = QMixer(n, info.state_dim, config.mixing_embed_dim, config.hypernet_hidden)
            central_mixer = CentralMixer(n, info.state_dim, config)
        self.nets: dict[str, nn.Module] = {
            "agent": agents[0],
            "mixer": mixer,
            "central_agent": agents[1],
            "central_mixer": central_mixer,
        }
        self.nets["target_central_agent"] = copy.deepcopy(agents[1])
        self.nets["target_central_mixer"] = copy.deepcopy(central_mixer)
        for net in self.nets.values():
            net.to(self.device)
        self.optimizers = {
            name: adam(self.nets[name].parameters(), config.learning_rate) for name in LIVE
        }
        self.params = [p for name in LIVE for p in self.nets[name].parameters()]

    def _tensor(self, x: NDArray[Any]) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)

    def _utilities(self, name: str, obs: torch.Tensor, avail: torch.Tensor) -> torch.Tensor:
        """Per-agent utilities (B, N, A) of network ``name``, unavailable actions pushed down."""
        q, _ = self.nets[name](obs)
        return masked_logits(self.ops, q, avail)

    # -- acting -------------------------------------------------------------------------------

    def _zero_memory(self, num_envs: int) -> torch.Tensor:
        shape = (num_envs, self.info.num_agents, self.config.rnn_hidden_size)
        return torch.zeros(shape, device=self.device)

    def _keep_memory(self, memory: torch.Tensor, keep: NDArray[np.float32]) -> torch.Tensor:
        return memory * self._tensor(keep).to(memory.dtype)[:, None, None]

    @torch.inference_mode()
    def _greedy_actions(
        self, observation: Observation, memory: Memory
    ) -> tuple[NDArray[Any], Memory]:
        obs, avail = self._tensor(observation.obs), self._tensor(observation.avail_actions)
        if memory is None:
            q = self._utilities("agent", obs, avail)
        else:
            out, memory = self.nets["agent"](obs.unsqueeze(0), memory)
            q = masked_logits(self.ops, out[0], avail)
        return torch.argmax(q, dim=-1).cpu().numpy(), memory

    # -- learning -----------------------------------------------------------------------------

    def _targets(self, b: Mapping[str, torch.Tensor], greedy: torch.Tensor) -> tuple[Any, Any]:
        """y and, for CW (the only weighting that reads it), Q*_target(s, u^); no gradient."""
        ops, nets = self.ops, self.nets
        with torch.no_grad():
            greedy_next = torch.argmax(self._utilities("agent", b["next_obs"], b["next_avail"]), -1)
            q_next = ops.gather_last(nets["target_central_agent"](b["next_obs"])[0], greedy_next)
            q_next = ops.where(b["agent_mask"] > 0.5, q_next, 0.0)
            q_star_next = nets["target_central_mixer"](q_next, b["next_state"])
            team_reward = (b["rewards"] * b["agent_mask"]).sum(-1) / b["agent_mask"].sum(-1).clamp(
                min=1.0
            )
            target = td_target(ops, team_reward, q_star_next, b["terminated"], self.config.gamma)
            if self.config.weighting != "cw":
                return target, None
            q_greedy = ops.gather_last(nets["target_central_agent"](b["obs"])[0], greedy)
            q_greedy = ops.where(b["agent_mask"] > 0.5, q_greedy, 0.0)
            q_star_greedy = nets["target_central_mixer"](q_greedy, b["state"])
        return target, q_star_greedy

    def _transition_update(self, batch: ReplayBatch) -> dict[str, float]:
        ops, nets, cfg = self.ops, self.nets, self.config
        b = {
            "obs": batch.obs, "state": batch.state, "actions": batch.actions,
            "rewards": batch.rewards, "next_obs": batch.next_obs, "next_state": batch.next_state,
            "terminated": batch.terminated, "agent_mask": batch.agent_mask,
            "avail": batch.avail_actions, "next_avail": batch.next_avail_actions,
        }  # fmt: skip
        t = {k: self._tensor(v) for k, v in b.items()}
        live = t["agent_mask"] > 0.5
        q = self._utilities("agent", t["obs"], t["avail"])
        greedy = torch.argmax(q.detach(), dim=-1)
        target, q_star_greedy = self._targets(t, greedy)
        q_taken = ops.where(live, ops.gather_last(q, t["actions"]), 0.0)
        q_tot = nets["mixer"](q_taken, t["state"])
        q_central = ops.gather_last(nets["central_agent"](t["obs"])[0], t["actions"])
        q_star = nets["central_mixer"](ops.where(live, q_central, 0.0), t["state"])
        weights = weights_for(
            ops, cfg.weighting, td_error=q_tot.detach() - target,
            is_greedy=is_greedy_joint_action(ops, t["actions"], greedy, t["agent_mask"]),
            target=target, q_central_greedy=q_star_greedy, alpha=cfg.alpha,
        )  # fmt: skip
        transitions = ops.max(t["agent_mask"], axis=-1)  # rows with at least one live agent
        terms = wqmix_loss(ops, q_tot, q_star, target, weights, transitions)
        return self._finish(terms, q_tot.mean(), target.mean())

    def _finish(
        self, terms: Any, q_tot_mean: torch.Tensor, target_mean: torch.Tensor
    ) -> dict[str, float]:
        """The gradient step on ``terms.loss`` and the stats."""
        item = self.ops.item
        return {
            "grad_norm": self._step(terms.loss), "loss": item(terms.loss),
            "loss_qmix": item(terms.loss_qmix), "loss_central": item(terms.loss_central),
            "weight_mean": item(terms.weight_mean), "q_tot_mean": item(q_tot_mean),
            "target_mean": item(target_mean),
        }  # fmt: skip

    def _unroll(self, name: str, obs: torch.Tensor) -> torch.Tensor:
        """Network ``name``'s utilities (L, B, N, A) over time-first episodes ``obs`` (L, B, N,
        D), from a zero hidden state at each episode's first step."""
        shape = (*obs.shape[1:3], self.config.rnn_hidden_size)
        q, _ = self.nets[name].unroll(obs, torch.zeros(shape, device=self.device))
        return q

    def _episode_update(self, batch: EpisodeBatch) -> dict[str, float]:
        """One gradient step on whole episodes: step t's target bootstraps from step t + 1 (the
        observation an episode ended on, at its last step); padding is masked out."""
        ops, nets, cfg = self.ops, self.nets, self.config
        t = {k: self._tensor(v) for k, v in vars(episode_inputs(batch)).items()}
        live = t["agent_mask"] > 0.5
        q_all = masked_logits(ops, self._unroll("agent", t["obs"]), t["avail_actions"])
        greedy_all = torch.argmax(q_all.detach(), dim=-1)  # (T+1, B, N)
        greedy, greedy_next = greedy_all[:-1], greedy_all[1:]
        state, next_state = t["state"][:-1], t["state"][1:]
        with torch.no_grad():
            q_target = self._unroll("target_central_agent", t["obs"])
            q_next = ops.where(live, ops.gather_last(q_target[1:], greedy_next), 0.0)
            q_star_next = nets["target_central_mixer"](q_next, next_state)
            target = td_target(ops, t["team_reward"], q_star_next, t["terminated"], cfg.gamma)
            q_star_greedy = None  # read by CW's weights only
            if cfg.weighting == "cw":
                q_greedy = ops.where(live, ops.gather_last(q_target[:-1], greedy), 0.0)
                q_star_greedy = nets["target_central_mixer"](q_greedy, state)
        q_taken = ops.where(live, ops.gather_last(q_all[:-1], t["actions"]), 0.0)
        q_tot = nets["mixer"](q_taken, state)
        q_central = ops.gather_last(self._unroll("central_agent", t["obs"][:-1]), t["actions"])
        q_star = nets["central_mixer"](ops.where(live, q_central, 0.0), state)
        weights = weights_for(
            ops, cfg.weighting, td_error=q_tot.detach() - target,
            is_greedy=is_greedy_joint_action(ops, t["actions"], greedy, t["agent_mask"]),
            target=target, q_central_greedy=q_star_greedy, alpha=cfg.alpha,
        )  # fmt: skip
        mask = t["mask"]
        terms = wqmix_loss(ops, q_tot, q_star, target, weights, mask)
        return self._finish(
            terms, masked_mean(ops, q_tot.detach(), mask), masked_mean(ops, target, mask)
        )

    def _step(self, loss: torch.Tensor) -> float:
        return gradient_step(
            self.ops, loss, list(self.optimizers.values()), self.params, self.config.max_grad_norm
        )

    def _sync_targets(self) -> None:
        for name in TARGETS:
            self.nets[name].load_state_dict(self.nets[name.removeprefix("target_")].state_dict())
