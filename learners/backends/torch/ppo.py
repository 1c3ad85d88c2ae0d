"""MAPPO and IPPO in PyTorch (Yu et al., 2022; de Witt et al., 2020): one learner, two configs.

The actor maps each agent's observation to a categorical distribution over its available actions
or to a diagonal Gaussian (mean from the network, a learned state-independent log std). The critic
maps the global state (MAPPO, ``MAPPOConfig.centralised_critic``) or the agent's own observation
(IPPO) to a value. Both compute all env copies and all agents in one forward pass.

Everything that is math lives in ``learners.functional`` (distributions, PPO losses, global-norm
clipping) and ``learners.algorithms.ppo`` (GAE, value normalisation, learning-rate schedule); this
module supplies the networks, the device placement and the gradient step. Exploration noise comes
from a NumPy generator, so its stream is the same in every backend and resumes exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from learners import rng
from learners.algorithms.ppo import (
    PPOConfig,
    PPOStats,
    learning_rate_at,
    rollout_targets,
    sample_actions,
)
from learners.backends.torch.agent_nets import AgentMLP
from learners.backends.torch.networks import (
    load_module,
    load_optimizer,
    module_state,
    optimizer_state,
)
from learners.backends.torch.ops import TorchOps
from learners.buffers.rollout import RolloutBuffer, RolloutStep
from learners.envs.base import EnvInfo, Observation
from learners.functional import distributions as dist
from learners.functional.gradients import clip_by_global_norm
from learners.functional.losses import PPOLoss, entropy_bonus, policy_loss, ppo_loss, value_loss
from learners.functional.normalizer import ValueNormalizer

Memory = torch.Tensor | None
"""The actor's GRU state of the training copies, (E, N, H); None for feed-forward policies."""


class Actor(AgentMLP):
    """The policy network; continuous actions add ``log_std`` ((A,) shared or (N, A))."""

    def __init__(self, config: PPOConfig, info: EnvInfo) -> None:
        super().__init__(
            info.obs_dim,
            config.hidden_sizes,
            info.action_dim,
            info.num_agents,
            shared=config.share_parameters,
            activation=config.activation,
            rnn_hidden_size=config.rnn_hidden_size if config.recurrent else None,
        )
        self.log_std: torch.nn.Parameter | None = None
        if info.action_kind == "continuous":
            lead = () if config.share_parameters else (info.num_agents,)
            self.log_std = torch.nn.Parameter(
                torch.full((*lead, info.action_dim), config.log_std_init)
            )


def _critic(config: PPOConfig, info: EnvInfo) -> AgentMLP:
    inputs = info.state_dim if config.centralised_critic else info.obs_dim
    return AgentMLP(
        inputs,
        config.hidden_sizes,
        1,
        info.num_agents,
        shared=config.share_parameters,
        activation=config.activation,
        rnn_hidden_size=config.rnn_hidden_size if config.recurrent else None,
    )


class TorchPPO:
    """The PyTorch MAPPO/IPPO learner (``learners.runners.on_policy`` drives it)."""

    def __init__(self, config: PPOConfig, info: EnvInfo, device: str, seed: int) -> None:
        self.config, self.info = config, info
        self.device = torch.device(device)
        if self.device.type == "cpu":
            # Networks this small run fastest on one thread: handing a 64-wide matmul to a second
            # thread costs more than it saves, and on a busy 2-core worker it costs ~5x.
            torch.set_num_threads(1)
        self.ops = TorchOps(self.device)
        self.discrete = info.action_kind == "discrete"
        generator = torch.Generator().manual_seed(seed)
        self.actor = Actor(config, info)
        self.critic = _critic(config, info)
        self.actor.reset_parameters(generator, head_gain=0.01)
        self.critic.reset_parameters(generator, head_gain=1.0)
        self.nets: dict[str, AgentMLP] = {
            "actor": self.actor.to(self.device),
            "critic": self.critic.to(self.device),
        }
        # One Adam per network with the same settings is the same as one over both (Adam is
        # per-parameter); it keeps each network's moments under its own checkpoint names.
        self.optimizers = {
            name: torch.optim.Adam(
                net.parameters(), lr=config.learning_rate, eps=1e-5, foreach=True
            )
            for name, net in self.nets.items()
        }
        self.params = [p for net in self.nets.values() for p in net.parameters()]
        self.normalizer = ValueNormalizer()
        self.exploration = rng.generator(seed, "exploration")
        self.minibatch_rng = rng.generator(seed, "minibatches")
        self.updates = 0
        self.learning_rate = config.learning_rate
        self._act_memory: Memory = None
        # The critic's GRU state at the start of the next rollout (None: zeros).
        self._critic_start: Memory = None

    # -- acting -------------------------------------------------------------------------------

    def initial_memory(self, num_envs: int) -> Memory:
        """The actor's state for ``num_envs`` copies starting new episodes (the critic's too)."""
        self._critic_start = None
        if not self.config.recurrent:
            return None
        shape = (num_envs, self.info.num_agents, self.config.rnn_hidden_size)
        return torch.zeros(shape, device=self.device)

    def reset_memory(self, memory: Memory, ended: NDArray[np.bool_]) -> Memory:
        """``memory`` with the copies whose episode ended set back to zero."""
        if memory is None or not ended.any():
            return memory
        return memory * self._tensor(~ended).to(memory.dtype)[:, None, None]

    def _tensor(self, x: NDArray[Any]) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)

    def _critic_input(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """The critic's input (..., N or 1, features): the agent's observation (IPPO) or the
        global state (MAPPO). With shared parameters the state keeps a size-1 agent axis: the
        first layer computes it once and broadcasts it over the agents' ids."""
        if not self.config.centralised_critic:
            return obs
        state = state.unsqueeze(-2)
        if self.config.share_parameters:
            return state
        return state.expand(*state.shape[:-2], self.info.num_agents, state.shape[-1])

    def _actor_step(self, obs: torch.Tensor, h: Memory) -> tuple[torch.Tensor, Memory]:
        """The actor's output for one step of (E, N, obs); recurrent: and its next state."""
        if h is None:
            return self.actor(obs)[0], None
        out, h_next = self.actor(obs.unsqueeze(0), h)
        return out[0], h_next

    def _sample(
        self, out: torch.Tensor, avail: NDArray[np.float32], explore: bool
    ) -> tuple[NDArray[Any], NDArray[np.float32]]:
        """Actions and log-probabilities on the host (``sample_actions``)."""
        log_std = None if self.actor.log_std is None else self.actor.log_std.detach().cpu().numpy()
        return sample_actions(out.cpu().numpy(), avail, log_std, self.exploration, explore)

    def _log_prob(
        self, out: torch.Tensor, actions: torch.Tensor, avail: torch.Tensor
    ) -> torch.Tensor:
        if self.discrete:
            return dist.categorical_log_prob(self.ops, out, actions, avail)
        assert self.actor.log_std is not None
        return dist.normal_log_prob(self.ops, actions, out, self.actor.log_std.expand_as(out))

    def _entropy(self, out: torch.Tensor, avail: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return dist.categorical_entropy(self.ops, out, avail)
        assert self.actor.log_std is not None
        return dist.normal_entropy(self.ops, self.actor.log_std.expand_as(out))

    def _env_actions(self, actions: NDArray[Any]) -> NDArray[Any]:
        return actions if self.discrete else np.clip(actions, -1.0, 1.0)

    @torch.inference_mode()
    def rollout_step(self, observation: Observation, memory: Memory) -> tuple[RolloutStep, Memory]:
        """Sample actions for every copy and agent with their log-probabilities (one forward
        pass of the actor); the critic values the rollout afterwards, in ``update``."""
        out, memory_next = self._actor_step(self._tensor(observation.obs), memory)
        actions, log_prob = self._sample(out, observation.avail_actions, explore=True)
        step = RolloutStep(
            actions=actions,
            env_actions=self._env_actions(actions),
            log_prob=log_prob,
            hidden=None if memory is None else memory.cpu().numpy(),
        )
        return step, memory_next

    @torch.inference_mode()
    def act(self, observation: Observation, *, explore: bool) -> NDArray[Any]:
        """Actions for a batched observation (evaluation, replays); a recurrent policy carries its
        own GRU state between calls (``end_episodes`` clears it)."""
        num_envs = observation.obs.shape[0]
        if self.config.recurrent and (
            self._act_memory is None or self._act_memory.shape[0] != num_envs
        ):
            self._act_memory = torch.zeros(
                (num_envs, self.info.num_agents, self.config.rnn_hidden_size), device=self.device
            )
        out, self._act_memory = self._actor_step(self._tensor(observation.obs), self._act_memory)
        actions, _ = self._sample(out, observation.avail_actions, explore)
        return self._env_actions(actions)

    def end_episodes(self, ended: NDArray[np.bool_]) -> None:
        """Forget ``act``'s GRU state for the copies whose episode ended."""
        self._act_memory = self.reset_memory(self._act_memory, ended)

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
            h = self._critic_start
            if h is None or h.shape[0] != buffer.info.num_envs:
                shape = (buffer.info.num_envs, self.info.num_agents, critic.gru.hidden_size)
                h = torch.zeros(shape, device=self.device)
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

    def lr_decay(self, step: int, total_steps: int) -> float:
        """Set the step size for env step ``step`` of ``total_steps``; returns it."""
        self.learning_rate = learning_rate_at(self.config, step, total_steps)
        for optimizer in self.optimizers.values():
            for group in optimizer.param_groups:
                group["lr"] = self.learning_rate
        return self.learning_rate

    def update(self, buffer: RolloutBuffer) -> PPOStats:
        """``epochs`` passes of minibatch PPO over the rollout in ``buffer``."""
        self._value_pass(buffer)
        targets = rollout_targets(self.config, buffer, self.normalizer)
        data = self._rollout_tensors(buffer, targets.advantages, targets.returns)
        totals: dict[str, float] = {}
        count = 0
        for minibatch in self._minibatches(buffer, data):
            terms, grad_norm = self._step(minibatch)
            for name, value in terms._asdict().items():
                totals[name] = totals.get(name, 0.0) + float(value)
            totals["grad_norm"] = totals.get("grad_norm", 0.0) + grad_norm
            count += 1
        self.updates += 1
        means = {k: v / count for k, v in totals.items()}
        return PPOStats(
            **means, learning_rate=self.learning_rate, explained_variance=targets.explained_variance
        )

    def _rollout_tensors(
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
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Shuffled minibatches: of (step, env) rows, or of padded chunks when recurrent."""
        cfg = self.config
        if cfg.recurrent:
            chunks = buffer.chunks(cfg.chunk_length)
            hidden = {
                k: self._tensor(chunks.first(data.pop(k)))
                for k in ("actor_hidden", "critic_hidden")
            }
            # Time first: (L, C, ...); padding is masked through ``filled``.
            seq = {k: self._tensor(np.swapaxes(chunks.gather(v), 0, 1)) for k, v in data.items()}
            seq["mask"] = seq["mask"] * self._tensor(chunks.filled.T)[..., None]
            rows, axis = len(chunks.env), 1
        else:
            rows = buffer.length * buffer.info.num_envs
            seq = {k: self._tensor(v.reshape(rows, *v.shape[2:])) for k, v in data.items()}
            hidden, axis = {}, 0
        for _ in range(cfg.epochs):
            order = self.minibatch_rng.permutation(rows)
            for part in np.array_split(order, min(cfg.minibatches, rows)):
                index = torch.as_tensor(part, device=self.device)
                minibatch = {k: v.index_select(axis, index) for k, v in seq.items()}
                minibatch.update({k: v.index_select(0, index) for k, v in hidden.items()})
                yield minibatch

    def _losses(self, mb: Mapping[str, torch.Tensor]) -> PPOLoss[torch.Tensor]:
        cfg, ops = self.config, self.ops
        out, _ = self.actor(mb["obs"], mb.get("actor_hidden"))
        values, _ = self.critic(self._critic_input(mb["obs"], mb["state"]), mb.get("critic_hidden"))
        log_prob = self._log_prob(out, mb["actions"], mb["avail"])
        policy = policy_loss(
            ops, log_prob, mb["log_prob_old"], mb["advantages"], mb["mask"], cfg.clip_eps
        )
        loss_value = value_loss(
            ops,
            values[..., 0],
            mb["values_old"],
            mb["returns"],
            mb["mask"],
            cfg.value_clip_eps,
            cfg.huber_delta,
        )
        entropy = entropy_bonus(ops, self._entropy(out, mb["avail"]), mb["mask"])
        return ppo_loss(policy, loss_value, entropy, cfg.value_coef, cfg.entropy_coef)

    def _step(self, minibatch: Mapping[str, torch.Tensor]) -> tuple[PPOLoss[float], float]:
        """One gradient step on the combined loss, clipped by the global norm of all parameters."""
        terms = self._losses(minibatch)
        grads = torch.autograd.grad(terms.loss, self.params)
        clipped, norm = clip_by_global_norm(self.ops, list(grads), self.config.max_grad_norm)
        for param, grad in zip(self.params, clipped, strict=True):
            param.grad = grad
        for optimizer in self.optimizers.values():
            optimizer.step()
        return PPOLoss(*(float(t.detach()) for t in terms)), self.ops.item(norm)

    # -- checkpoints ----------------------------------------------------------------------------

    def policy_tensor_names(self) -> list[str]:
        return sorted(module_state("actor", self.actor))

    def state(self) -> dict[str, NDArray[Any]]:
        """Networks, Adam's moments, the value normaliser, random generators and counters."""
        tensors: dict[str, NDArray[Any]] = {}
        for name, net in self.nets.items():
            tensors.update(module_state(name, net))
            tensors.update(optimizer_state(name, self.optimizers[name], name, net))
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
        for name, net in self.nets.items():
            load_optimizer(name, self.optimizers[name], name, net, tensors)
        self.normalizer.load_state(tensors["value_norm"])
        rng.restore(self.exploration, tensors["rng/exploration"])
        rng.restore(self.minibatch_rng, tensors["rng/minibatches"])
        self.updates = int(tensors["counters/updates"])
