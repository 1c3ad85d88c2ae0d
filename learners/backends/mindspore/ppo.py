"""MAPPO and IPPO in MindSpore (Yu et al., 2022; de Witt et al., 2020): one learner, two configs.

The MindSpore twin of ``learners.backends.torch.ppo.TorchPPO``. The reference library's MindSpore
PPO halved the clip range, ignored ``huber_delta`` and multiplied the critic's prediction by the
agent mask before the loss (reference defect ``mindspore-ppo-loss``, docs/reference-defects.md);
this one computes every loss with the shared math (``learners.functional`` over ``MindSporeOps``;
the policy surrogate through its graph-safe form in ``learners.backends.mindspore.losses``), so the
configured ``clip_eps`` and ``huber_delta`` are the ones used and masks apply to losses, never to
predictions. Advantages, returns and value normalisation are the shared host-side
``rollout_targets``. Exploration noise and minibatch shuffles come from NumPy generators drawn in
the torch learner's order, so from one checkpoint both backends sample the same actions and train on
the same minibatches.

The host side every backend shares (memory, minibatches, stats, checkpoint bookkeeping) is
``learners.algorithms.ppo_learner.PPOLearner``; this module feeds the compiled cells of
``ppo_nets``: one graph call per rollout step (the actor), one per minibatch (the whole gradient
step), and one per rollout for the values (one per step for a recurrent critic). Minibatches are
padded with masked-out rows to one size per rollout shape, so a graph is compiled once per shape,
not once per minibatch: a masked mean does not see rows whose mask is zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Tensor
from numpy.typing import NDArray

from learners import rng
from learners.algorithms.ppo import PPOConfig, agent_specific_state
from learners.algorithms.ppo_learner import PPOLearner, TrainingRows
from learners.backends.mindspore.networks import (
    MindSporeState,
    named_parameters,
)
from learners.backends.mindspore.optim import TorchAdam
from learners.backends.mindspore.ppo_nets import (
    OPS,
    Actor,
    ActStep,
    CriticInput,
    PPOLossCell,
    RecurrentValueStep,
    TrainStep,
    ValuePass,
    critic,
)
from learners.buffers.rollout import RolloutBuffer
from learners.envs.base import EnvInfo, Observation

Memory = Tensor | None
"""The actor's GRU state of the training copies, (E, N, H); None for feed-forward policies."""

# Stands in for an input a configuration does not use (a feed-forward network's hidden state, the
# empty action mask of continuous actions): every cell keeps one signature.
_PLACEHOLDER = np.zeros((1,), np.float32)
# The order of ``TrainStep.construct``'s minibatch inputs.
_FIELDS = ("obs", "state", "avail", "actions", "log_prob_old", "values_old", "returns",
           "advantages", "mask", "actor_hidden", "critic_hidden")  # fmt: skip


def padded_size(rows: int, parts: int, recurrent: bool) -> int:
    """The row count every minibatch is padded to: the largest part of ``rows`` split ``parts``
    ways; recurrent chunk counts vary from rollout to rollout, so theirs is rounded up to one of a
    few sizes (powers of two up to 16, multiples of 16 after) to bound the compilations."""
    size = math.ceil(rows / parts)
    if not recurrent:
        return size
    return 1 << (size - 1).bit_length() if size <= 16 else 16 * math.ceil(size / 16)


class MindSporePPO(MindSporeState, PPOLearner[Tensor]):
    """The MindSpore MAPPO/IPPO learner (``learners.runners.on_policy`` drives it)."""

    def __init__(self, config: PPOConfig, info: EnvInfo, device: str, seed: int) -> None:
        super().__init__(config, info, seed)
        self.device = device
        self.ops = OPS
        init = rng.generator(seed, "init")
        self.actor = Actor(config, info, init)
        self.critic = critic(config, info, init)
        self.nets = {"actor": self.actor, "critic": self.critic}
        # One Adam per network (as in torch): the moments keep their network's names.
        self.optimizers = {name: self._adam(net) for name, net in self.nets.items()}
        critic_input = CriticInput(
            config.centralised_critic, info.num_agents, agent_specific_state(config)
        )
        loss = PPOLossCell(self.actor, self.critic, critic_input, config)
        self._cells = {
            "act": ActStep(self.actor),
            "train": TrainStep(
                loss, self.optimizers["actor"], self.optimizers["critic"], config.max_grad_norm
            ),
            "values": RecurrentValueStep(self.critic, critic_input)
            if config.recurrent
            else ValuePass(self.critic, critic_input),
        }
        self.set_compiled(True)

    def _adam(self, net: Any) -> TorchAdam:
        named = named_parameters(net)
        lr = self.config.learning_rate
        return TorchAdam([p for _, p in named], [n for n, _ in named], lr, eps=1e-5)

    def set_compiled(self, compiled: bool) -> None:
        """Run the rollout step, the value pass and the minibatch step as compiled graphs (the
        default) or eagerly (PyNative)."""
        self.compiled = compiled
        cells = [self._cells[k] for k in ("act", "train", "values")]
        self._act_step, self._train_step, self._value_step = (
            ms.jit(cell) if compiled else cell for cell in cells
        )

    # -- acting -------------------------------------------------------------------------------

    def _tensor(self, x: NDArray[Any]) -> Tensor:
        return self.ops.asarray(x if x.size else _PLACEHOLDER)

    def _noise(self, batch_shape: tuple[int, ...], explore: bool) -> NDArray[np.float32]:
        """One step's exploration draw, as the torch learner draws it (same stream); zeros, and
        no draw, for the deterministic policy."""
        shape = (*batch_shape, self.info.action_dim)
        if not explore:
            return np.zeros(shape, np.float32)
        if self.discrete:  # Gumbel-max: argmax(logits + Gumbel noise) is a categorical sample
            return self.exploration.gumbel(size=shape).astype(np.float32)
        return self.exploration.standard_normal(size=shape, dtype=np.float32)

    def _policy_step(
        self, observation: Observation, memory: Memory, explore: bool
    ) -> tuple[NDArray[Any], NDArray[np.float32], Memory]:
        """One compiled call: the actor's forward pass, the actions from host-drawn noise and their
        log-probabilities."""
        noise = self._noise(observation.obs.shape[:2], explore)
        h = self._tensor(_PLACEHOLDER) if memory is None else memory
        actions, log_prob, h_next = self._act_step(
            self._tensor(observation.obs), self._tensor(observation.avail_actions),
            self._tensor(noise), h,
        )  # fmt: skip
        return actions.asnumpy(), log_prob.asnumpy(), None if memory is None else h_next

    # -- the value pass -------------------------------------------------------------------------

    def _value_pass(self, buffer: RolloutBuffer) -> None:
        """Value every observation of the rollout (each step's, each ended episode's final one,
        and the one after the last step) and store them in ``buffer``."""
        t = self._tensor
        if not self.config.recurrent:
            arrays = (buffer.obs, buffer.state, buffer.final_obs, buffer.final_state,
                      buffer.last_obs, buffer.last_state, _PLACEHOLDER)  # fmt: skip
            outputs = self._value_step(*(t(a) for a in arrays))
            buffer.set_values(*(np.asarray(v.asnumpy()) for v in outputs))
            return
        steps, envs = buffer.length, buffer.info.num_envs
        starts = np.concatenate([np.zeros((1, envs)), buffer.episode_end[:-1]]).astype(np.float32)
        values = np.zeros((steps, envs, self.info.num_agents), np.float32)
        final = np.zeros_like(values)
        state = self._critic_memory(envs)
        for i in range(steps):
            value, final_value, before, state = self._value_step(
                t(buffer.obs[i]), t(buffer.state[i]), t(buffer.final_obs[i]),
                t(buffer.final_state[i]), state, t(starts[i]),
            )  # fmt: skip
            values[i], final[i] = value.asnumpy(), final_value.asnumpy()
            buffer.critic_hidden[i] = before.asnumpy()
        # The next rollout starts from the state after the last step, reset where that step
        # ended an episode; the bootstrap value follows from it.
        ended = buffer.episode_end[-1].astype(np.float32)
        self._critic_start = t(state.asnumpy() * (1.0 - ended)[:, None, None])
        no_reset = np.zeros(envs, np.float32)
        last, _, _, _ = self._value_step(
            t(buffer.last_obs), t(buffer.last_state), t(buffer.last_obs), t(buffer.last_state),
            self._critic_start, t(no_reset),
        )  # fmt: skip
        buffer.set_values(values, final, np.asarray(last.asnumpy()))

    # -- learning -----------------------------------------------------------------------------

    def _set_learning_rate(self, learning_rate: float) -> None:
        for optimizer in self.optimizers.values():
            optimizer.learning_rate = learning_rate

    def _train(self, rows: TrainingRows, minibatches: Iterator[NDArray[np.int64]]) -> NDArray[Any]:
        """Each minibatch padded to ``padded_size`` rows, its inputs in ``_FIELDS`` order (a
        feed-forward network's hidden states are placeholders)."""
        cfg = self.config
        size = padded_size(rows.count, min(cfg.minibatches, rows.count), cfg.recurrent)
        outputs = []
        for part in minibatches:
            minibatch = rows.take(part, pad_to=size)
            hyper = [self.optimizers[name].next_hyper() for name in ("actor", "critic")]
            inputs = (self._tensor(minibatch.get(k, _PLACEHOLDER)) for k in _FIELDS)
            outputs.append(self._train_step(*hyper, *inputs))
        # One read-back per update: the minibatches' terms stay in the graph's outputs till here.
        return np.stack([o.asnumpy() for o in outputs]).astype(np.float64)
