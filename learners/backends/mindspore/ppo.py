"""MAPPO and IPPO in MindSpore (Yu et al., 2022; de Witt et al., 2020): one learner, two configs.

The MindSpore twin of ``learners.backends.torch.ppo.TorchPPO``. The reference library's MindSpore
PPO halved the clip range, ignored ``huber_delta`` and multiplied the critic's prediction by the
agent mask before the loss (seeds defect 2); this one computes every loss with the shared math
(``learners.functional`` over ``MindSporeOps``; the policy surrogate through its graph-safe form in
``learners.backends.mindspore.losses``), so the configured ``clip_eps`` and ``huber_delta`` are the
ones used and masks apply to losses, never to predictions. Advantages, returns and value
normalisation are the shared host-side ``rollout_targets``. Exploration noise and minibatch shuffles
come from NumPy generators drawn in the torch learner's order, so from one checkpoint both backends
sample the same actions and train on the same minibatches.

The host side is here: rollouts, the value pass, minibatching, checkpoints. The compiled cells are
in ``ppo_nets``: one graph call per rollout step (the actor), one per minibatch (the whole gradient
step), and one per rollout for the values (one per step for a recurrent critic). Minibatches are
padded with masked-out rows to one size per rollout shape, so a graph is compiled once per shape,
not once per minibatch: a masked mean does not see rows whose mask is zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Tensor
from numpy.typing import NDArray

from learners import rng
from learners.algorithms.ppo import PPOConfig, PPOStats, learning_rate_at, rollout_targets
from learners.backends.mindspore.networks import load_module, module_state, named_parameters
from learners.backends.mindspore.optim import TorchAdam
from learners.backends.mindspore.ppo_nets import (
    OPS,
    PPO_TERMS,
    Actor,
    ActStep,
    CriticInput,
    PPOLossCell,
    RecurrentValueStep,
    TrainStep,
    ValuePass,
    critic,
)
from learners.buffers.rollout import RolloutBuffer, RolloutStep
from learners.envs.base import EnvInfo, Observation
from learners.functional.normalizer import ValueNormalizer

Memory = Tensor | None
"""The actor's GRU state of the training copies, (E, N, H); None for feed-forward policies."""
Arrays = dict[str, NDArray[Any]]

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


def _pad(array: NDArray[Any], axis: int, size: int) -> NDArray[Any]:
    missing = size - array.shape[axis]
    if missing == 0:
        return array
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, missing)
    return np.pad(array, widths)


class MindSporePPO:
    """The MindSpore MAPPO/IPPO learner (``learners.runners.on_policy`` drives it)."""

    def __init__(self, config: PPOConfig, info: EnvInfo, device: str, seed: int) -> None:
        self.config, self.info, self.device = config, info, device
        self.ops = OPS
        self.discrete = info.action_kind == "discrete"
        init = rng.generator(seed, "init")
        self.actor = Actor(config, info, init)
        self.critic = critic(config, info, init)
        self.nets = {"actor": self.actor, "critic": self.critic}
        # One Adam per network (as in torch): the moments keep their network's names.
        self.optimizers = {name: self._adam(net) for name, net in self.nets.items()}
        critic_input = CriticInput(config.centralised_critic, info.num_agents)
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
        self.normalizer = ValueNormalizer()
        self.exploration = rng.generator(seed, "exploration")
        self.minibatch_rng = rng.generator(seed, "minibatches")
        self.updates = 0
        self.learning_rate = config.learning_rate
        self._act_memory: Memory = None
        # The critic's GRU state at the start of the next rollout (None: zeros).
        self._critic_start: NDArray[np.float32] | None = None
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

    def initial_memory(self, num_envs: int) -> Memory:
        """The actor's state for ``num_envs`` copies starting new episodes (the critic's too)."""
        self._critic_start = None
        if not self.config.recurrent:
            return None
        return self._zeros_state(num_envs)

    def _zeros_state(self, num_envs: int) -> Tensor:
        shape = (num_envs, self.info.num_agents, self.config.rnn_hidden_size)
        return self._tensor(np.zeros(shape, np.float32))

    def reset_memory(self, memory: Memory, ended: NDArray[np.bool_]) -> Memory:
        """``memory`` with the copies whose episode ended set back to zero."""
        if memory is None or not ended.any():
            return memory
        return memory * self._tensor((~ended).astype(np.float32)[:, None, None])

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

    def _env_actions(self, actions: NDArray[Any]) -> NDArray[Any]:
        return actions if self.discrete else np.clip(actions, -1.0, 1.0)

    def _act(
        self, observation: Observation, memory: Memory, explore: bool
    ) -> tuple[NDArray[Any], NDArray[np.float32], Memory]:
        noise = self._noise(observation.obs.shape[:2], explore)
        h = self._tensor(_PLACEHOLDER) if memory is None else memory
        actions, log_prob, h_next = self._act_step(
            self._tensor(observation.obs), self._tensor(observation.avail_actions),
            self._tensor(noise), h,
        )  # fmt: skip
        return actions.asnumpy(), log_prob.asnumpy(), None if memory is None else h_next

    def rollout_step(self, observation: Observation, memory: Memory) -> tuple[RolloutStep, Memory]:
        """Sample actions for every copy and agent with their log-probabilities (one compiled
        call); the critic values the rollout afterwards, in ``update``."""
        actions, log_prob, memory_next = self._act(observation, memory, explore=True)
        step = RolloutStep(
            actions=actions,
            env_actions=self._env_actions(actions),
            log_prob=log_prob,
            hidden=None if memory is None else memory.asnumpy(),
        )
        return step, memory_next

    def act(self, observation: Observation, *, explore: bool) -> NDArray[Any]:
        """Actions for a batched observation (evaluation, replays); a recurrent policy carries its
        own GRU state between calls (``end_episodes`` clears it)."""
        num_envs = observation.obs.shape[0]
        if self.config.recurrent and (
            self._act_memory is None or self._act_memory.shape[0] != num_envs
        ):
            self._act_memory = self._zeros_state(num_envs)
        actions, _, self._act_memory = self._act(observation, self._act_memory, explore)
        return self._env_actions(actions)

    def end_episodes(self, ended: NDArray[np.bool_]) -> None:
        """Forget ``act``'s GRU state for the copies whose episode ended."""
        self._act_memory = self.reset_memory(self._act_memory, ended)

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
        h = self._critic_start
        if h is None or h.shape[0] != envs:
            h = np.zeros((envs, self.info.num_agents, self.config.rnn_hidden_size), np.float32)
        starts = np.concatenate([np.zeros((1, envs)), buffer.episode_end[:-1]]).astype(np.float32)
        values = np.zeros((steps, envs, self.info.num_agents), np.float32)
        final = np.zeros_like(values)
        state = t(h)
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
        last_state = state.asnumpy() * (1.0 - ended)[:, None, None]
        self._critic_start = last_state
        no_reset = np.zeros(envs, np.float32)
        last, _, _, _ = self._value_step(
            t(buffer.last_obs), t(buffer.last_state), t(buffer.last_obs), t(buffer.last_state),
            t(last_state), t(no_reset),
        )  # fmt: skip
        buffer.set_values(values, final, np.asarray(last.asnumpy()))

    # -- learning -----------------------------------------------------------------------------

    def lr_decay(self, step: int, total_steps: int) -> float:
        """Set the step size for env step ``step`` of ``total_steps``; returns it."""
        self.learning_rate = learning_rate_at(self.config, step, total_steps)
        for optimizer in self.optimizers.values():
            optimizer.learning_rate = self.learning_rate
        return self.learning_rate

    def update(self, buffer: RolloutBuffer) -> PPOStats:
        """Value the rollout in ``buffer``, then ``epochs`` passes of minibatch PPO over it."""
        self._value_pass(buffer)
        targets = rollout_targets(self.config, buffer, self.normalizer)
        data = self._rollout_arrays(buffer, targets.advantages, targets.returns)
        outputs = []
        for minibatch in self._minibatches(buffer, data):
            hyper = [self.optimizers[name].next_hyper() for name in ("actor", "critic")]
            outputs.append(self._train_step(*hyper, *(self._tensor(minibatch[k]) for k in _FIELDS)))
        self.updates += 1
        # One read-back per update: the minibatches' terms stay in the graph's outputs till here.
        means = np.mean(np.stack([o.asnumpy() for o in outputs]).astype(np.float64), axis=0)
        stats = dict(zip((*PPO_TERMS, "grad_norm"), (float(v) for v in means), strict=True))
        return PPOStats(
            **stats, learning_rate=self.learning_rate, explained_variance=targets.explained_variance
        )

    def _rollout_arrays(
        self, buffer: RolloutBuffer, advantages: NDArray[np.float32], returns: NDArray[np.float32]
    ) -> Arrays:
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

    def _minibatches(self, buffer: RolloutBuffer, data: Arrays) -> Iterator[Arrays]:
        """Shuffled minibatches: of (step, env) rows, or of padded chunks when recurrent. The
        shuffles come from the same generator, in the same order, as in the torch learner; each
        minibatch is padded with masked-out rows to ``padded_size``."""
        cfg = self.config
        hidden: Arrays = {}
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
            seq.update(actor_hidden=_PLACEHOLDER, critic_hidden=_PLACEHOLDER)
        parts = min(cfg.minibatches, rows)
        size = padded_size(rows, parts, cfg.recurrent)
        for _ in range(cfg.epochs):
            order = self.minibatch_rng.permutation(rows)
            for part in np.array_split(order, parts):
                minibatch = {
                    k: v if v is _PLACEHOLDER else _pad(np.take(v, part, axis=axis), axis, size)
                    for k, v in seq.items()
                }
                minibatch.update({k: _pad(v[part], 0, size) for k, v in hidden.items()})
                yield minibatch

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
