"""MAPPO and IPPO in PyTorch (Yu et al., 2022; de Witt et al., 2020): one learner, two configs.

The actor maps each agent's observation to a categorical distribution over its available actions
or to a diagonal Gaussian (mean from the network, a learned state-independent log std). The critic
maps the global state (MAPPO, ``MAPPOConfig.centralised_critic``) or the agent's own observation
(IPPO) to a value. Both compute all env copies and all agents in one forward pass.

Everything that is math lives in ``learners.functional`` (distributions, PPO losses, global-norm
clipping) and ``learners.algorithms.ppo`` (GAE, value normalisation, learning-rate schedule), and
the host side of the learner (memory, minibatches, stats, checkpoint bookkeeping) in
``learners.algorithms.ppo_learner``; this module supplies the networks, the device placement, the
value pass and the gradient step. Exploration noise comes from a NumPy generator, so its stream is
the same in every backend and resumes exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

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
    broadcasts_state,
    initial_log_std,
    network_args,
)
from learners.backends.torch.agent_nets import AgentMLP
from learners.backends.torch.networks import TorchState, adam, gradient_step
from learners.backends.torch.ops import TorchOps
from learners.buffers.rollout import RolloutBuffer
from learners.envs.base import EnvInfo, Observation
from learners.functional import distributions as dist
from learners.functional.losses import PPOLoss

Memory = torch.Tensor | None
"""The actor's GRU state of the training copies, (E, N, H); None for feed-forward policies."""


class Actor(AgentMLP):
    """The policy network; continuous actions add ``log_std`` ((A,) shared, (T, A) per team or
    (N, A) per agent)."""

    def __init__(self, config: PPOConfig, info: EnvInfo) -> None:
        super().__init__(**network_args(config, info, "actor"))
        log_std = initial_log_std(config, info)
        self.log_std: torch.nn.Parameter | None = None
        if log_std is not None:
            self.log_std = torch.nn.Parameter(torch.from_numpy(log_std))

    def agent_log_std(self) -> torch.Tensor:
        """The log std as the agents use it: (A,) shared, else (N, A)."""
        assert self.log_std is not None
        team = self.head.index  # each agent's team, when each team has its own weights
        return self.log_std if team is None else self.log_std[team]


class TorchPPO(TorchState, PPOLearner[torch.Tensor]):
    """The PyTorch MAPPO/IPPO learner (``learners.runners.on_policy`` drives it)."""

    def __init__(self, config: PPOConfig, info: EnvInfo, device: str, seed: int) -> None:
        super().__init__(config, info, seed)
        self.device = torch.device(device)
        if self.device.type == "cpu":
            # Networks this small run fastest on one thread: handing a 64-wide matmul to a second
            # thread costs more than it saves, and on a busy 2-core worker it costs ~5x.
            torch.set_num_threads(1)
        self.ops = TorchOps(self.device)
        generator = torch.Generator().manual_seed(seed)
        self.actor = Actor(config, info)
        self.critic = AgentMLP(**network_args(config, info, "critic"))
        self.actor.reset_parameters(generator, head_gain=HEAD_GAIN["actor"])
        self.critic.reset_parameters(generator, head_gain=HEAD_GAIN["critic"])
        self.nets: dict[str, AgentMLP] = {
            "actor": self.actor.to(self.device),
            "critic": self.critic.to(self.device),
        }
        # One Adam per network with the same settings is the same as one over both (Adam is
        # per-parameter); it keeps each network's moments under its own checkpoint names.
        self.optimizers = {
            name: adam(net.parameters(), config.learning_rate, eps=1e-5)
            for name, net in self.nets.items()
        }
        self.params = [p for net in self.nets.values() for p in net.parameters()]
        # Decided once: _critic_input runs on every value pass and minibatch.
        self._broadcast_state = broadcasts_state(config, info)
        self._agent_specific = agent_specific_state(config)

    def _tensor(self, x: NDArray[Any]) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)

    def _critic_input(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """The critic's input (..., N or 1, features): the agent's observation (IPPO), the
        global state (MAPPO), or the global state followed by the agent's observation (MAPPO
        with ``agent_specific_state``). With shared parameters the global state alone keeps a
        size-1 agent axis: the first layer computes it once and broadcasts it over the agents'
        ids."""
        if not self.config.centralised_critic:
            return obs
        state = state.unsqueeze(-2)
        if self._broadcast_state:
            return state
        state = state.expand(*state.shape[:-2], self.info.num_agents, state.shape[-1])
        if self._agent_specific:
            return torch.cat([state, obs], dim=-1)
        return state

    # -- acting -------------------------------------------------------------------------------

    @torch.inference_mode()
    def _policy_step(
        self, observation: Observation, memory: Memory, explore: bool
    ) -> tuple[NDArray[Any], NDArray[np.float32], Memory]:
        """One forward pass of the actor; the actions are sampled on the host
        (``sample_actions``)."""
        obs = self._tensor(observation.obs)
        if memory is None:
            out, memory_next = self.actor(obs)[0], None
        else:
            out, memory_next = self.actor(obs.unsqueeze(0), memory)
            out = out[0]
        log_std = None
        if self.actor.log_std is not None:
            log_std = self.actor.agent_log_std().detach().cpu().numpy()
        actions, log_prob = sample_actions(
            out.cpu().numpy(), observation.avail_actions, log_std, self.exploration, explore
        )
        return actions, log_prob, memory_next

    def _log_prob(
        self, out: torch.Tensor, actions: torch.Tensor, avail: torch.Tensor
    ) -> torch.Tensor:
        if self.discrete:
            return dist.categorical_log_prob(self.ops, out, actions, avail)
        log_std = self.actor.agent_log_std().expand_as(out)
        return dist.normal_log_prob(self.ops, actions, out, log_std)

    def _entropy(self, out: torch.Tensor, avail: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return dist.categorical_entropy(self.ops, out, avail)
        return dist.normal_entropy(self.ops, self.actor.agent_log_std().expand_as(out))

    @torch.inference_mode()
    def _value_pass(self, buffer: RolloutBuffer) -> None:
        """Value every observation of the rollout (each step's, each ended episode's final one,
        and the one after the last step) in one batched pass, and store them in ``buffer``."""
        critic, t = self.critic, self._tensor
        inputs = self._critic_input(t(buffer.obs), t(buffer.state))
        final_inputs = self._critic_input(t(buffer.final_obs), t(buffer.final_state))
        last_inputs = self._critic_input(t(buffer.last_obs), t(buffer.last_state))
        if critic.gru is None:
            values, final, last = (critic(x)[0] for x in (inputs, final_inputs, last_inputs))
        else:
            ended = t(buffer.episode_end).to(torch.float32)
            starts = torch.cat([torch.zeros_like(ended[:1]), ended[:-1]])
            h = self._critic_memory(buffer.info.num_envs)
            after, before = critic.recur(critic.encode(inputs), h, starts)
            values = critic.decode(after)
            # The final observation follows the state after its step; the next rollout starts
            # from the state after the last step, reset where that step ended an episode.
            final = critic.decode(critic.gru(critic.gru.input(critic.encode(final_inputs)), after))
            self._critic_start = after[-1] * (1.0 - ended[-1])[:, None, None]
            last_x = critic.gru.input(critic.encode(last_inputs))
            last = critic.decode(critic.gru(last_x, self._critic_start))
            buffer.critic_hidden[...] = before.cpu().numpy()
        buffer.set_values(*(v[..., 0].cpu().numpy() for v in (values, final, last)))

    # -- learning -----------------------------------------------------------------------------

    def _set_learning_rate(self, learning_rate: float) -> None:
        for optimizer in self.optimizers.values():
            for group in optimizer.param_groups:
                group["lr"] = learning_rate

    def _train(self, rows: TrainingRows, minibatches: Iterator[NDArray[np.int64]]) -> NDArray[Any]:
        """The rollout goes to the device once; each minibatch is gathered there."""
        sequences = {k: self._tensor(v) for k, v in rows.sequences.items()}
        hidden = {k: self._tensor(v) for k, v in rows.hidden.items()}
        terms = []
        for part in minibatches:
            index = torch.as_tensor(part, device=self.device)
            minibatch = {k: v.index_select(rows.axis, index) for k, v in sequences.items()}
            minibatch.update({k: v.index_select(0, index) for k, v in hidden.items()})
            loss_terms, grad_norm = self._step(minibatch)
            terms.append([*loss_terms, grad_norm])
        return np.array(terms, np.float64)

    def _losses(self, mb: Mapping[str, torch.Tensor]) -> PPOLoss[torch.Tensor]:
        out, _ = self.actor(mb["obs"], mb.get("actor_hidden"))
        values, _ = self.critic(self._critic_input(mb["obs"], mb["state"]), mb.get("critic_hidden"))
        return minibatch_loss(
            self.ops, self.config, mb, out, values[..., 0], self._log_prob, self._entropy
        )

    def _step(self, minibatch: Mapping[str, torch.Tensor]) -> tuple[PPOLoss[float], float]:
        """One gradient step on the combined loss, clipped by the global norm of all parameters."""
        terms = self._losses(minibatch)
        norm = gradient_step(
            self.ops, terms.loss, list(self.optimizers.values()), self.params,
            self.config.max_grad_norm,
        )  # fmt: skip
        return PPOLoss(*(float(t.detach()) for t in terms)), norm
