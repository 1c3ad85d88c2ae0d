"""The host side of a MAPPO/IPPO learner, written once for every backend.

Most of a PPO learner is bookkeeping that does not depend on its framework: the GRU memory of acting
and of the critic's value pass, the step-size schedule, the rollout laid out as training rows (or,
recurrent, as time-first chunks), the shuffled minibatch indices, the mean of the minibatches' loss
terms, and the host half of the checkpoint (value normaliser, generators, counters). The reference
library wrote all of it three times and the copies drifted (``/work/shared/seeds/README.md``);
here ``PPOLearner`` does it once and a backend subclasses it with what only a framework can do: the
networks, the policy's forward pass, the critic's value pass, the gradient step and the conversion
of parameters and optimiser moments to checkpoint tensors (``docs/backends.md``).

Every random draw stays on the host, from the same NumPy generators in the same order, which is what
lets the parity suite hold the backends to the same actions and the same minibatches.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal

import numpy as np
from numpy.typing import NDArray

from learners import rng
from learners.algorithms.learner_state import NetworkState
from learners.algorithms.ppo import (
    PPOConfig,
    PPOStats,
    RolloutTargets,
    agent_specific_state,
    learning_rate_at,
    rollout_targets,
)
from learners.buffers.rollout import RolloutBuffer, RolloutStep
from learners.envs.base import EnvInfo, Observation
from learners.envs.teams import TeamSeats, team_seats
from learners.functional.losses import PPOLoss
from learners.functional.normalizer import ValueNormalizer
from learners.functional.ops import A, Ops

TRAIN_TERMS: tuple[str, ...] = (*PPOLoss._fields, "grad_norm")
"""What one minibatch step reports, in this order: the loss terms, then the gradient's global norm
before clipping."""

NETWORKS = ("actor", "critic")
"""The networks whose parameters and Adam moments a checkpoint holds, in the checkpoint's order."""


HEAD_GAIN = {"actor": 0.01, "critic": 1.0}
"""Orthogonal-init gain of each network's output layer: a near-uniform initial policy, and values
on the returns' scale."""


def network_args(
    config: PPOConfig, info: EnvInfo, network: Literal["actor", "critic"]
) -> dict[str, Any]:
    """Every backend's ``AgentMLP`` arguments for the actor or the critic. The actor maps the
    agent's observation to its action logits or Gaussian means; the critic maps the global state
    (MAPPO, ``centralised_critic``) or the agent's own observation (IPPO) to one value."""
    if network == "actor":
        in_features, out_features = info.obs_dim, info.action_dim
    else:
        in_features = info.state_dim if config.centralised_critic else info.obs_dim
        if agent_specific_state(config):
            in_features += info.obs_dim
        out_features = 1
    return {
        "in_features": in_features,
        "hidden_sizes": config.hidden_sizes,
        "out_features": out_features,
        "num_agents": info.num_agents,
        "shared": config.share_parameters,
        "seats": seats(config, info),
        "activation": config.activation,
        "rnn_hidden_size": config.rnn_hidden_size if config.recurrent else None,
    }


def seats(config: PPOConfig, info: EnvInfo) -> TeamSeats | None:
    """The agents' seats when parameters are shared within each of several sharing sets (teams,
    and a team's groups unless ``share_across_groups``: each set its own actor and critic,
    ``(T, ...)`` tensors); ``None`` when one set serves every agent or every agent has its own."""
    if not config.share_parameters:
        return None
    return team_seats(info.sharing_sets(across_groups=config.share_across_groups))


def initial_log_std(config: PPOConfig, info: EnvInfo) -> NDArray[np.float32] | None:
    """Continuous actions: the Gaussian's learned, state-independent log std at the start, (A,)
    shared by all agents, (T, A) one per team or (N, A) per agent; ``None`` for discrete
    actions."""
    if info.action_kind != "continuous":
        return None
    by_team = seats(config, info)
    if by_team is not None:
        lead: tuple[int, ...] = (by_team.num_teams,)
    else:
        lead = () if config.share_parameters else (info.num_agents,)
    return np.full((*lead, info.action_dim), config.log_std_init, np.float32)


def broadcasts_state(config: PPOConfig, info: EnvInfo) -> bool:
    """MAPPO's critic input can keep a size-1 agent axis (the first layer computes the global
    state once and broadcasts it over the agents' ids) when one critic serves every agent and its
    input is the global state alone."""
    return (
        config.share_parameters and seats(config, info) is None and not agent_specific_state(config)
    )


def env_actions(actions: NDArray[Any], discrete: bool) -> NDArray[Any]:
    """What the env receives: continuous actions clipped to [-1, 1]. The rollout keeps the sampled,
    unclipped ones, whose log-probabilities the update recomputes."""
    return actions if discrete else np.clip(actions, -1.0, 1.0)


@dataclass(frozen=True)
class TrainingRows:
    """A rollout laid out as the update trains on it: rows to shuffle into minibatches.

    Feed-forward, a row is one (step, env) pair with its agent axis: ``sequences`` are (R, N, ...)
    and ``axis`` is 0. Recurrent, a row is one chunk of consecutive steps (``Chunks``), time
    first: ``sequences`` are (L, R, N, ...), ``axis`` is 1, the chunks' padding is zero in
    ``mask``, and ``hidden`` holds each chunk's starting GRU states (R, N, H).
    """

    sequences: dict[str, NDArray[Any]]
    """``obs``, ``state``, ``avail``, ``actions``, ``log_prob_old``, ``values_old``, ``returns``,
    ``advantages``, ``mask``."""
    hidden: dict[str, NDArray[Any]]
    """``actor_hidden`` and ``critic_hidden`` when recurrent; empty otherwise."""
    count: int
    """R, the number of rows."""
    axis: int
    """The axis of ``sequences`` that indexes rows."""

    def take(self, index: NDArray[np.int64], pad_to: int | None = None) -> dict[str, NDArray[Any]]:
        """The rows ``index`` of every array. ``pad_to`` appends zero rows up to that many, for a
        compiled graph that wants one shape: a masked mean does not see rows whose mask is 0."""
        batch = {k: np.take(v, index, axis=self.axis) for k, v in self.sequences.items()}
        hidden = {k: v[index] for k, v in self.hidden.items()}
        if pad_to is not None:
            batch = {k: _pad(v, self.axis, pad_to) for k, v in batch.items()}
            hidden = {k: _pad(v, 0, pad_to) for k, v in hidden.items()}
        return {**batch, **hidden}


def _pad(array: NDArray[Any], axis: int, size: int) -> NDArray[Any]:
    missing = size - array.shape[axis]
    if missing == 0:
        return array
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, missing)
    return np.pad(array, widths)


def training_rows(
    config: PPOConfig, buffer: RolloutBuffer, targets: RolloutTargets
) -> TrainingRows:
    """The rollout in ``buffer`` and its ``targets`` as ``TrainingRows``."""
    data = {
        "obs": buffer.obs,
        "state": buffer.state,
        "avail": buffer.avail_actions,
        "actions": buffer.actions,
        "log_prob_old": buffer.log_prob,
        "values_old": buffer.values,
        "returns": targets.returns,
        "advantages": targets.advantages,
        "mask": buffer.agent_mask,
    }
    if not config.recurrent:
        count = buffer.length * buffer.info.num_envs
        # An explicit row count: ``-1`` cannot be inferred for continuous actions' (T, E, N, 0)
        # ``avail`` array.
        sequences = {k: v.reshape(count, *v.shape[2:]) for k, v in data.items()}
        return TrainingRows(sequences, {}, count, axis=0)
    chunks = buffer.chunks(config.chunk_length)
    hidden = {
        "actor_hidden": chunks.first(buffer.actor_hidden),
        "critic_hidden": chunks.first(buffer.critic_hidden),
    }
    sequences = {k: np.swapaxes(chunks.gather(v), 0, 1) for k, v in data.items()}
    sequences["mask"] = sequences["mask"] * chunks.filled.T[..., None]
    return TrainingRows(sequences, hidden, len(chunks.env), axis=1)


def minibatch_indices(
    config: PPOConfig, rows: int, generator: np.random.Generator
) -> Iterator[NDArray[np.int64]]:
    """The row indices of every minibatch of the update: ``epochs`` shuffles of ``rows`` rows, each
    split into ``minibatches`` parts (fewer when there are fewer rows). Drawn lazily, one
    permutation per epoch, from ``generator`` (``rng/minibatches``)."""
    for _ in range(config.epochs):
        order = generator.permutation(rows)
        yield from np.array_split(order, min(config.minibatches, rows))


def mean_stats(
    terms: NDArray[np.float64], learning_rate: float, targets: RolloutTargets
) -> PPOStats:
    """``PPOStats`` from every minibatch's ``TRAIN_TERMS`` (one row each): their means, summed in
    minibatch order in float64; and what the rollout's ``targets`` report."""
    totals = np.zeros(len(TRAIN_TERMS))
    for row in terms:
        totals += row
    means = totals / len(terms)
    return PPOStats(
        **{name: float(value) for name, value in zip(TRAIN_TERMS, means, strict=True)},
        learning_rate=learning_rate,
        explained_variance=targets.explained_variance,
        target_mean=targets.target_mean,
        target_max=targets.target_max,
    )


class PPOLearner(NetworkState, Generic[A]):
    """A MAPPO/IPPO learner's host side (``learners.runners.on_policy`` drives it).

    ``A`` is the backend's array type and ``ops`` its ``Ops``. A subclass builds its networks and
    optimisers after ``__init__`` and implements the abstract methods (``NetworkState``'s for the
    actor and the critic too); the memory passed between rollout steps is a backend array
    (E, N, H), or ``None`` for feed-forward policies.
    """

    ops: Ops[A]

    def __init__(self, config: PPOConfig, info: EnvInfo, seed: int) -> None:
        self.config, self.info = config, info
        self.discrete = info.action_kind == "discrete"
        self.normalizer = ValueNormalizer()
        self.exploration = rng.generator(seed, "exploration")
        self.minibatch_rng = rng.generator(seed, "minibatches")
        self.updates = 0
        self.learning_rate = config.learning_rate
        self._act_memory: A | None = None
        # The critic's GRU state at the start of the next rollout (None: zeros).
        self._critic_start: A | None = None

    # -- what a backend supplies --------------------------------------------------------------

    @abstractmethod
    def _policy_step(
        self, observation: Observation, memory: A | None, explore: bool
    ) -> tuple[NDArray[Any], NDArray[np.float32], A | None]:
        """Sampled (or, without ``explore``, greedy) actions, their log-probabilities and the
        actor's next memory for one step of every copy; the noise comes from ``exploration``."""

    @abstractmethod
    def _value_pass(self, buffer: RolloutBuffer) -> None:
        """Value every observation of the rollout and hand the values to ``buffer.set_values``;
        recurrent: also fill ``buffer.critic_hidden``, starting from ``_critic_memory`` and leaving
        the state after the last step (reset where it ended an episode) in ``_critic_start``."""

    @abstractmethod
    def _train(self, rows: TrainingRows, minibatches: Iterator[NDArray[np.int64]]) -> NDArray[Any]:
        """One gradient step per minibatch of ``rows`` (each an index array, in order); returns
        every step's ``TRAIN_TERMS`` as a (minibatches, len(TRAIN_TERMS)) float64 array."""

    @abstractmethod
    def _set_learning_rate(self, learning_rate: float) -> None:
        """Give every optimiser this step size."""

    # -- memory -------------------------------------------------------------------------------

    def _zero_memory(self, num_envs: int) -> A:
        return self.ops.asarray(
            np.zeros((num_envs, self.info.num_agents, self.config.rnn_hidden_size), np.float32)
        )

    def _critic_memory(self, num_envs: int) -> A:
        """The critic's GRU state at this rollout's start: where the last rollout left it, or zeros
        after ``initial_memory``, a load, or a change in the number of copies."""
        start = self._critic_start
        if start is None or start.shape[0] != num_envs:
            return self._zero_memory(num_envs)
        return start

    def initial_memory(self, num_envs: int) -> A | None:
        """The actor's state for ``num_envs`` copies starting new episodes (the critic's too)."""
        self._critic_start = None
        if not self.config.recurrent:
            return None
        return self._zero_memory(num_envs)

    def reset_memory(self, memory: A | None, ended: NDArray[np.bool_]) -> A | None:
        """``memory`` with the copies whose episode ended set back to zero."""
        if memory is None or not ended.any():
            return memory
        return memory * self.ops.asarray((~ended).astype(np.float32)[:, None, None])

    # -- acting -------------------------------------------------------------------------------

    def rollout_step(
        self, observation: Observation, memory: A | None
    ) -> tuple[RolloutStep, A | None]:
        """Sample actions for every copy and agent with their log-probabilities (one forward
        pass of the actor); the critic values the rollout afterwards, in ``update``."""
        actions, log_prob, memory_next = self._policy_step(observation, memory, explore=True)
        step = RolloutStep(
            actions=actions,
            env_actions=env_actions(actions, self.discrete),
            log_prob=log_prob,
            hidden=None if memory is None else self.ops.to_numpy(memory),
        )
        return step, memory_next

    def act(self, observation: Observation, *, explore: bool) -> NDArray[Any]:
        """Actions for a batched observation (evaluation, replays); a recurrent policy carries its
        own GRU state between calls (``end_episodes`` clears it)."""
        num_envs = observation.obs.shape[0]
        if self.config.recurrent and (
            self._act_memory is None or self._act_memory.shape[0] != num_envs
        ):
            self._act_memory = self._zero_memory(num_envs)
        actions, _, self._act_memory = self._policy_step(observation, self._act_memory, explore)
        return env_actions(actions, self.discrete)

    def end_episodes(self, ended: NDArray[np.bool_]) -> None:
        """Forget ``act``'s GRU state for the copies whose episode ended."""
        self._act_memory = self.reset_memory(self._act_memory, ended)

    # -- learning -----------------------------------------------------------------------------

    def lr_decay(self, step: int, total_steps: int) -> float:
        """Set the step size for env step ``step`` of ``total_steps``; returns it."""
        self.learning_rate = learning_rate_at(self.config, step, total_steps)
        self._set_learning_rate(self.learning_rate)
        return self.learning_rate

    def update(self, buffer: RolloutBuffer) -> PPOStats:
        """Value the rollout in ``buffer``, then ``epochs`` passes of minibatch PPO over it."""
        self._value_pass(buffer)
        targets = rollout_targets(self.config, buffer, self.normalizer)
        rows = training_rows(self.config, buffer, targets)
        terms = self._train(rows, minibatch_indices(self.config, rows.count, self.minibatch_rng))
        self.updates += 1
        return mean_stats(terms, self.learning_rate, targets)

    # -- checkpoints --------------------------------------------------------------------------

    def state(self) -> dict[str, NDArray[Any]]:
        """Networks, Adam's moments, the value normaliser, random generators and counters."""
        tensors: dict[str, NDArray[Any]] = {}
        for name in NETWORKS:
            tensors.update(self._module_state(name))
            tensors.update(self._optimizer_state(name))
        tensors["value_norm"] = self.normalizer.state()
        tensors["rng/exploration"] = rng.state_tensor(self.exploration)
        tensors["rng/minibatches"] = rng.state_tensor(self.minibatch_rng)
        tensors["counters/updates"] = np.array(self.updates, np.int64)
        return tensors

    def load_state(self, tensors: Mapping[str, NDArray[Any]], *, policy_only: bool = False) -> None:
        """Restore ``state()``'s tensors (only the actor's with ``policy_only``). Memory kept
        between calls is not part of the state: it restarts from zeros."""
        self._load_module("actor", tensors)
        self._act_memory = self._critic_start = None
        if policy_only:
            return
        self._load_module("critic", tensors)
        for name in NETWORKS:
            self._load_optimizer(name, tensors)
        self.normalizer.load_state(tensors["value_norm"])
        rng.restore(self.exploration, tensors["rng/exploration"])
        rng.restore(self.minibatch_rng, tensors["rng/minibatches"])
        self.updates = int(tensors["counters/updates"])
