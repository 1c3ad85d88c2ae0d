"""MAPPO/IPPO's networks and the cells the MindSpore learner compiles (``learners.backends.
mindspore.ppo`` drives them from the host).

- ``ActStep``: the actor's forward pass for one step of every copy, the sampled actions (Gumbel-max
  for discrete actions, a Gaussian draw for continuous ones, from noise drawn on the host) and
  their log-probabilities; with zero noise it is the deterministic policy.
- ``ValuePass`` / ``RecurrentValueStep``: the critic's values of a rollout, after it.
- ``PPOLossCell`` and ``TrainStep``: one minibatch's loss (the shared math over ``MindSporeOps``),
  its gradient over actor and critic together, global-norm clipping and both Adam steps.

Cells hold plain Python settings, not the pydantic config: graph mode reads them as constants. A
feed-forward network still takes a hidden-state argument (a placeholder it passes through), so every
cell has one signature whatever the config.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from learners.algorithms.ppo import PPOConfig
from learners.algorithms.ppo_learner import HEAD_GAIN, initial_log_std, network_args
from learners.backends.mindspore.agent_nets import AgentMLP
from learners.backends.mindspore.losses import policy_terms
from learners.backends.mindspore.networks import parameter, parameters
from learners.backends.mindspore.ops import MindSporeOps, exp64
from learners.backends.mindspore.optim import TorchAdam, clip_flat, flatten
from learners.envs.base import EnvInfo
from learners.functional import distributions as dist
from learners.functional.losses import entropy_bonus, value_loss

OPS = MindSporeOps()


class Actor(AgentMLP):
    """The policy network; continuous actions add ``log_std`` ((A,) shared, (T, A) per team or
    (N, A) per agent)."""

    def __init__(self, config: PPOConfig, info: EnvInfo, init: np.random.Generator) -> None:
        super().__init__(
            **network_args(config, info, "actor"), rng=init, head_gain=HEAD_GAIN["actor"]
        )
        self.discrete = info.action_kind == "discrete"
        log_std = initial_log_std(config, info)
        if log_std is not None:
            self.log_std: Parameter = parameter(log_std, "log_std")

    def agent_log_std(self) -> Tensor:
        """The log std as the agents use it: (A,) shared, else (N, A)."""
        if self.by_team:  # each agent's team's
            return ops.gather(self.log_std, self.head.index, 0)
        return self.log_std

    def log_prob(self, out: Tensor, actions: Tensor, avail: Tensor) -> Tensor:
        """log pi(a | o) of ``actions`` given the network's output ``out``."""
        if self.discrete:
            return dist.categorical_log_prob(OPS, out, actions, avail)
        log_std = ops.broadcast_to(self.agent_log_std(), out.shape)
        return dist.normal_log_prob(OPS, actions, out, log_std)

    def entropy(self, out: Tensor, avail: Tensor) -> Tensor:
        """The policy's entropy at each entry."""
        if self.discrete:
            return dist.categorical_entropy(OPS, out, avail)
        return dist.normal_entropy(OPS, ops.broadcast_to(self.agent_log_std(), out.shape))

    def sample(self, out: Tensor, avail: Tensor, noise: Tensor) -> Tensor:
        """Actions from host-drawn ``noise``: Gumbel noise for discrete actions (argmax of the
        perturbed logits is a categorical sample), standard normal for continuous ones."""
        if self.discrete:
            return ops.argmax(dist.masked_logits(OPS, out, avail) + noise, -1)
        return out + exp64(self.agent_log_std()) * noise


def critic(config: PPOConfig, info: EnvInfo, init: np.random.Generator) -> AgentMLP:
    """The value network: on the global state (MAPPO) or the agent's own observation (IPPO)."""
    return AgentMLP(**network_args(config, info, "critic"), rng=init, head_gain=HEAD_GAIN["critic"])


class CriticInput(nn.Cell):
    """What the critic sees: the state broadcast to every agent (MAPPO), followed by the agent's
    own observation when ``agent_specific``, or the observation alone (IPPO)."""

    def __init__(self, centralised: bool, num_agents: int, agent_specific: bool = False) -> None:
        super().__init__()
        self.centralised, self.num_agents = centralised, num_agents
        self.agent_specific = agent_specific

    def construct(self, obs: Tensor, state: Tensor) -> Tensor:
        if not self.centralised:
            return obs
        shape = state.shape[:-1] + (self.num_agents, state.shape[-1])
        state = ops.broadcast_to(ops.expand_dims(state, -2), shape)
        if self.agent_specific:
            return ops.concat((state, obs), -1)
        return state


class ActStep(nn.Cell):
    """One step of the policy for (E, N, ...) inputs: actions, log-probabilities, next state."""

    def __init__(self, actor: Actor) -> None:
        super().__init__()
        self.actor = actor

    def construct(
        self, obs: Tensor, avail: Tensor, noise: Tensor, h: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        if self.actor.recurrent:
            out, h = self.actor(ops.expand_dims(obs, 0), h)
            out = out[0]
        else:
            out, h = self.actor(obs, h)
        actions = self.actor.sample(out, avail, noise)
        return actions, self.actor.log_prob(out, actions, avail), h


class ValuePass(nn.Cell):
    """A feed-forward critic's values (squeezed) of every step, final and last observation."""

    def __init__(self, net: AgentMLP, critic_input: CriticInput) -> None:
        super().__init__()
        self.net, self.critic_input = net, critic_input

    def _values(self, obs: Tensor, state: Tensor, h: Tensor) -> Tensor:
        return ops.squeeze(self.net(self.critic_input(obs, state), h)[0], -1)

    def construct(
        self,
        obs: Tensor, state: Tensor, final_obs: Tensor, final_state: Tensor,
        last_obs: Tensor, last_state: Tensor, h: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        return (
            self._values(obs, state, h),
            self._values(final_obs, final_state, h),
            self._values(last_obs, last_state, h),
        )


class RecurrentValueStep(nn.Cell):
    """One step of a recurrent critic over a rollout: the state is zeroed where an episode starts
    (``start`` (E,)), then advanced by the step's observation; returns the step's value, the value
    of the step's final observation (from the state after the step), and the states before and
    after it."""

    def __init__(self, net: AgentMLP, critic_input: CriticInput) -> None:
        super().__init__()
        self.net, self.critic_input = net, critic_input

    def construct(
        self, obs: Tensor, state: Tensor, final_obs: Tensor, final_state: Tensor,
        h: Tensor, start: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
        before = h * ops.reshape(1.0 - start, (-1, 1, 1))
        after = self.net.gru_step(self.net.encode(self.critic_input(obs, state)), before)
        final_x = self.net.encode(self.critic_input(final_obs, final_state))
        final_h = self.net.gru_step(final_x, after)
        value = ops.squeeze(self.net.decode(after), -1)
        final_value = ops.squeeze(self.net.decode(final_h), -1)
        return value, final_value, before, after


class PPOLossCell(nn.Cell):
    """One minibatch's loss = loss_policy + value_coef * loss_value - entropy_coef * entropy, with
    the other terms as auxiliary outputs (``PPOLoss``'s fields after ``loss``)."""

    def __init__(self, actor: Actor, net: AgentMLP, critic_input: CriticInput, config: PPOConfig):
        super().__init__()
        self.actor, self.critic, self.critic_input = actor, net, critic_input
        self.clip_eps, self.value_clip_eps = config.clip_eps, config.value_clip_eps
        self.huber_delta = config.huber_delta
        self.value_coef, self.entropy_coef = config.value_coef, config.entropy_coef

    def construct(
        self, obs: Tensor, state: Tensor, avail: Tensor, actions: Tensor, log_prob_old: Tensor,
        values_old: Tensor, returns: Tensor, advantages: Tensor, mask: Tensor,
        actor_hidden: Tensor, critic_hidden: Tensor,
    ) -> tuple[Tensor, tuple[Tensor, ...]]:  # fmt: skip
        out, _ = self.actor(obs, actor_hidden)
        values, _ = self.critic(self.critic_input(obs, state), critic_hidden)
        log_prob = self.actor.log_prob(out, actions, avail)
        loss_policy, approx_kl, clip_fraction = policy_terms(
            OPS, log_prob, log_prob_old, advantages, mask, self.clip_eps
        )
        loss_value = value_loss(
            OPS, ops.squeeze(values, -1), values_old, returns, mask,
            self.value_clip_eps, self.huber_delta,
        )  # fmt: skip
        entropy = entropy_bonus(OPS, self.actor.entropy(out, avail), mask)
        loss = loss_policy + self.value_coef * loss_value - self.entropy_coef * entropy
        return loss, (loss_policy, loss_value, entropy, approx_kl, clip_fraction)


class TrainStep(nn.Cell):
    """One gradient step on a minibatch: the gradient of the combined loss over every parameter,
    clipped by their global norm (only when ``max_grad_norm`` is set, never per tensor: reference
    defects ``per-tensor-clipping`` and ``two-clipping-names``), then each network's Adam step.
    Returns the loss terms and the norm stacked in ``learners.algorithms.ppo_learner.TRAIN_TERMS``'
    order."""

    def __init__(
        self, loss: PPOLossCell, actor_optim: TorchAdam, critic_optim: TorchAdam,
        max_grad_norm: float | None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.actor_optim, self.critic_optim = actor_optim, critic_optim
        self.split = actor_optim.size
        self.max_grad_norm = max_grad_norm
        weights = ms.ParameterTuple(parameters(loss.actor) + parameters(loss.critic))
        self.grad = ms.value_and_grad(loss, None, weights, has_aux=True)

    def construct(
        self, actor_hyper: Tensor, critic_hyper: Tensor, obs: Tensor, state: Tensor,
        avail: Tensor, actions: Tensor, log_prob_old: Tensor, values_old: Tensor,
        returns: Tensor, advantages: Tensor, mask: Tensor, actor_hidden: Tensor,
        critic_hidden: Tensor,
    ) -> Tensor:  # fmt: skip
        (loss, terms), grads = self.grad(
            obs, state, avail, actions, log_prob_old, values_old, returns, advantages, mask,
            actor_hidden, critic_hidden,
        )  # fmt: skip
        clipped, norm = clip_flat(flatten(grads), self.max_grad_norm)
        self.actor_optim(clipped[: self.split], actor_hyper)
        self.critic_optim(clipped[self.split :], critic_hyper)
        loss_policy, loss_value, entropy, approx_kl, clip_fraction = terms
        return ops.stack((loss, loss_policy, loss_value, entropy, approx_kl, clip_fraction, norm))
