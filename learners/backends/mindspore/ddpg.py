"""DDPG in MindSpore (Lillicrap et al., ICLR 2016); the math is ``learners.algorithms.ddpg``.

The reference library's MindSpore DDPG had no documentation and its torch twin computed the target
with gradients on (reference defects ``missing-tf-ddpg`` and ``target-with-gradient``,
docs/reference-defects.md). This one mirrors ``learners.backends.torch.ddpg.TorchDDPG``
member for member: the same losses (``learners.algorithms.ddpg`` over ``MindSporeOps``), the same
stats, the same checkpoint names, so the parity suite holds the backends to the same numbers. The
TD target comes from the target networks, outside both gradients, and passes through
``td_target``'s stop-gradient: the critic is never trained through its own target. Each gradient is
taken with respect to the network it trains only.

The whole update (target, critic step, actor step against the updated critic, Adam, soft updates)
is one cell, compiled with ``mindspore.jit``; ``set_compiled(False)`` runs it eagerly (PyNative)
instead (``benchmarks/mindspore_compile.py`` measures the difference). ``DDPGNets`` holds the pieces
MADDPG changes (``policy``, ``q``, ``batch_actions``, ``actor_actions``), as the torch learner's
``_policy``/``_q``.
"""

from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from numpy.typing import NDArray

from learners import rng as rngs
from learners.algorithms.ddpg import (
    DDPGConfig,
    DDPGLearner,
    DDPGStats,
    actor_loss,
    critic_loss,
    network_args,
)
from learners.backends.mindspore.networks import (
    MLP,
    MindSporeState,
    copy_into,
    named_parameters,
    parameters,
    soft_update,
)
from learners.backends.mindspore.ops import MindSporeOps
from learners.backends.mindspore.optim import TorchAdam, clip_flat, flatten
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation
from learners.functional.returns import td_target

OPS = MindSporeOps()
_PLACEHOLDER = np.zeros((1,), np.float32)
STATS = ("loss_actor", "loss_critic", "q_value", "td_target", "grad_norm_actor", "grad_norm_critic")


class DDPGNets(nn.Cell):
    """The four networks and the two functions of them the update needs."""

    def __init__(self, config: DDPGConfig, info: EnvInfo, init: np.random.Generator) -> None:
        super().__init__()
        self.actor, self.critic = self._build(config, info, init, trainable=True)
        self.target_actor, self.target_critic = self._build(config, info, init, trainable=False)
        copy_into(self.target_actor, self.actor)
        copy_into(self.target_critic, self.critic)

    def _build(
        self, config: DDPGConfig, info: EnvInfo, init: np.random.Generator, trainable: bool
    ) -> tuple[Any, Any]:
        actor = MLP(**network_args(config, info, "actor"), rng=init, trainable=trainable)
        critic = MLP(**network_args(config, info, "critic"), rng=init, trainable=trainable)
        return actor, critic

    # -- the pieces MADDPG overrides -----------------------------------------------------------
    def policy(self, obs: Tensor, avail: Tensor, noise: Tensor, target: bool = False) -> Tensor:
        """Actions (B, N, action_dim) as the critic takes them, for observations (B, N, obs_dim).
        ``avail`` (available discrete actions) and ``noise`` (the actor update's relaxation noise)
        are unused by DDPG."""
        actor = self.target_actor if target else self.actor
        return actor(obs)

    def q(self, obs: Tensor, actions: Tensor, target: bool = False) -> Tensor:
        """Q values (B, N) of each agent's (observation, action)."""
        critic = self.target_critic if target else self.critic
        return ops.squeeze(critic(ops.cat((obs, actions), -1)), -1)

    def batch_actions(self, actions: Tensor) -> Tensor:
        """The stored actions as the critic takes them."""
        return actions

    def actor_actions(self, policy: Tensor, stored: Tensor) -> Tensor:
        """What the critic is given in the actor's update, from the live policy's actions and the
        stored ones (as the critic takes them): DDPG's Q(s, mu(s)) takes the policy's."""
        return policy

    # ------------------------------------------------------------------------------------------
    def construct(self, obs: Tensor, avail: Tensor) -> Tensor:
        """The deterministic policy's actions (what acting reads)."""
        return self.actor(obs)


class CriticLoss(nn.Cell):
    """mean (Q(s, a) - y)^2 over live agents; the batch's mean Q rides along (no gradient)."""

    def __init__(self, nets: DDPGNets) -> None:
        super().__init__()
        self.nets = nets

    def construct(
        self, obs: Tensor, actions: Tensor, target: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        q = self.nets.q(obs, self.nets.batch_actions(actions))
        return critic_loss(OPS, q, target, mask), ops.stop_gradient(ops.mean(q))


class ActorLoss(nn.Cell):
    """-mean Q(s, mu(s)) over live agents."""

    def __init__(self, nets: DDPGNets) -> None:
        super().__init__()
        self.nets = nets

    def construct(
        self, obs: Tensor, actions: Tensor, avail: Tensor, noise: Tensor, mask: Tensor
    ) -> Tensor:
        policy = self.nets.policy(obs, avail, noise)
        given = self.nets.actor_actions(policy, self.nets.batch_actions(actions))
        return actor_loss(OPS, self.nets.q(obs, given), mask)


class DDPGUpdate(nn.Cell):
    """One whole DDPG update; returns ``STATS`` stacked into one float32 vector."""

    def __init__(
        self, nets: DDPGNets, actor_optim: TorchAdam, critic_optim: TorchAdam, config: DDPGConfig
    ) -> None:
        super().__init__()
        self.nets = nets
        self.actor_optim, self.critic_optim = actor_optim, critic_optim
        self.gamma, self.tau, self.max_grad_norm = config.gamma, config.tau, config.max_grad_norm
        self.critic_grad = ms.value_and_grad(
            CriticLoss(nets), None, critic_optim.params, has_aux=True
        )
        self.actor_grad = ms.value_and_grad(ActorLoss(nets), None, actor_optim.params)
        self.live = ms.ParameterTuple(parameters(nets.actor) + parameters(nets.critic))
        self.targets = ms.ParameterTuple(
            parameters(nets.target_actor) + parameters(nets.target_critic)
        )

    def construct(
        self,
        actor_hyper: Tensor,
        critic_hyper: Tensor,
        obs: Tensor,
        actions: Tensor,
        rewards: Tensor,
        next_obs: Tensor,
        terminated: Tensor,
        mask: Tensor,
        avail: Tensor,
        next_avail: Tensor,
        noise: Tensor,
    ) -> Tensor:
        next_actions = self.nets.policy(next_obs, next_avail, noise, True)
        q_next = ops.stop_gradient(self.nets.q(next_obs, next_actions, True))
        target = td_target(OPS, rewards, q_next, ops.expand_dims(terminated, 1), self.gamma)
        (loss_critic, q_value), grads = self.critic_grad(obs, actions, target, mask)
        grad, norm_critic = clip_flat(flatten(grads), self.max_grad_norm)
        self.critic_optim(grad, critic_hyper)
        # The actor's loss reads the critic just updated, as in the torch learner.
        loss_actor, grads = self.actor_grad(obs, actions, avail, noise, mask)
        grad, norm_actor = clip_flat(flatten(grads), self.max_grad_norm)
        self.actor_optim(grad, actor_hyper)
        soft_update(self.targets, self.live, self.tau)
        td_mean = ops.mean(target)
        return ops.stack((loss_actor, loss_critic, q_value, td_mean, norm_actor, norm_critic))


class MindSporeDDPG(MindSporeState, DDPGLearner):
    """DDPG's networks and optimisers in MindSpore."""

    def __init__(self, config: DDPGConfig, info: EnvInfo, device: str, seed: int) -> None:
        super().__init__(config, info, seed)
        self.device = device
        self.ops = OPS
        self.nets = self._build_nets(rngs.generator(seed, "init"))
        self.actor, self.critic = self.nets.actor, self.nets.critic
        self.actor_optimizer = self._adam(self.actor, config.learning_rate_actor)
        self.critic_optimizer = self._adam(self.critic, config.learning_rate_critic)
        self._update_cell = DDPGUpdate(
            self.nets, self.actor_optimizer, self.critic_optimizer, config
        )
        self.set_compiled(True)

    def _build_nets(self, init: np.random.Generator) -> DDPGNets:
        return DDPGNets(self.config, self.info, init)

    @staticmethod
    def _adam(net: nn.Cell, learning_rate: float) -> TorchAdam:
        named = named_parameters(net)
        return TorchAdam([p for _, p in named], [n for n, _ in named], learning_rate)

    def set_compiled(self, compiled: bool) -> None:
        """Run ``update`` and ``act`` as compiled graphs (the default) or eagerly."""
        self.compiled = compiled
        self._update = ms.jit(self._update_cell) if compiled else self._update_cell
        self._act = ms.jit(self.nets) if compiled else self.nets

    # ------------------------------------------------------------------------------------------
    def _tensor(self, array: NDArray[Any]) -> Tensor:
        return self.ops.asarray(array)

    def _input(self, array: NDArray[Any]) -> Tensor:
        """A graph input; an input the configuration does not use (the empty available-action
        mask of continuous actions) becomes one small placeholder, so every configuration compiles
        the same signature from inputs of a fixed size."""
        return self._tensor(array if array.size else _PLACEHOLDER)

    def _greedy_actions(self, observation: Observation) -> NDArray[np.float32]:
        obs, avail = self._tensor(observation.obs), self._input(observation.avail_actions)
        return np.asarray(self._act(obs, avail).asnumpy())

    def _update_noise(self, batch: ReplayBatch) -> NDArray[np.float32]:
        """The actor update's relaxation noise (MADDPG's discrete actions); none for DDPG."""
        return _PLACEHOLDER

    def _batch(self, batch: ReplayBatch) -> tuple[Tensor, ...]:
        """The update's inputs after the two step sizes, in ``DDPGUpdate.construct``'s order."""
        arrays = (
            batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.terminated,
            batch.agent_mask, batch.avail_actions, batch.next_avail_actions,
            self._update_noise(batch),
        )  # fmt: skip
        return tuple(self._input(a) for a in arrays)

    def update(self, batch: ReplayBatch) -> DDPGStats:
        hyper = (self.actor_optimizer.next_hyper(), self.critic_optimizer.next_hyper())
        out = self._update(*hyper, *self._batch(batch)).asnumpy()
        self.updates += 1
        return DDPGStats(**{name: float(v) for name, v in zip(STATS, out, strict=True)})

    def _network(self, name: str) -> nn.Cell:
        return getattr(self.nets, name)
