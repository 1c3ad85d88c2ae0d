"""The host side of a Weighted QMIX learner, written once for every backend.

What does not depend on a framework lives here: the env check, epsilon-greedy exploration (the
draws on the host, from ``rng/exploration``, in the same order in every backend), the GRU memory
of acting (``act``'s own, and the per-copy memory the off-policy runner keeps for
``explore_step``), the update counter and the periodic target sync, the stats, and the layout of
the checkpoint (six networks, four Adams' moments, the exploration generator, two counters). A
backend subclasses ``WQMIXLearner`` with what only a framework can do: the networks, the greedy
forward pass, the gradient step on transitions and on whole episodes, the target copy and the
conversions of ``NetworkState`` (``docs/backends.md``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from learners import rng
from learners.algorithms.learner_state import NetworkState
from learners.algorithms.wqmix import WQMIXConfig, WQMIXStats, epsilon_at, epsilon_greedy
from learners.buffers.episodes import EpisodeBatch
from learners.buffers.replay import ReplayBatch
from learners.envs.base import EnvInfo, Observation

LIVE = ("agent", "mixer", "central_agent", "central_mixer")
"""The trained networks, each with its own Adam (one global-norm clip over all of them)."""
TARGETS = ("target_central_agent", "target_central_mixer")
"""Copies of the central networks, synchronised every ``target_update_interval`` updates."""

M = TypeVar("M")
"""A backend's tensor type: the GRU state of a set of env copies, (E, N, H)."""


class WQMIXLearner(NetworkState, Generic[M]):
    """The host side of a WQMIX learner in any backend (``learners.runners.off_policy`` drives
    it). A subclass builds its networks after ``__init__`` and implements the abstract methods."""

    uses_state = True

    def __init__(self, config: WQMIXConfig, info: EnvInfo, seed: int) -> None:
        if info.action_kind != "discrete":
            raise ValueError(f"WQMIX needs discrete actions, not {info.action_kind}")
        self.config, self.info = config, info
        self.exploration = rng.generator(seed, "exploration")
        self.updates = 0
        self.explore_steps = 0
        self._act_memory: M | None = None

    # -- what a backend supplies --------------------------------------------------------------

    @abstractmethod
    def _zero_memory(self, num_envs: int) -> M:
        """A zero GRU state (num_envs, N, rnn_hidden_size) on the learner's device."""

    @abstractmethod
    def _keep_memory(self, memory: M, keep: NDArray[np.float32]) -> M:
        """``memory`` times ``keep`` (E,): 0 for the copies to reset, 1 for the others."""

    @abstractmethod
    def _greedy_actions(self, observation: Observation, memory: M | None) -> tuple[NDArray[Any], M]:
        """Each agent's greedy available action (E, N) on the host and, recurrent, the state
        after the step (feed-forward agents get and give back None)."""

    @abstractmethod
    def _transition_update(self, batch: ReplayBatch) -> Mapping[str, float]:
        """One gradient step of both losses on transitions; ``WQMIXStats``' fields but epsilon."""

    @abstractmethod
    def _episode_update(self, batch: EpisodeBatch) -> Mapping[str, float]:
        """One gradient step on whole episodes (recurrent agents), the same stats."""

    @abstractmethod
    def _sync_targets(self) -> None:
        """Copy each live central network into its target."""

    # -- acting -------------------------------------------------------------------------------

    def initial_memory(self, num_envs: int) -> M | None:
        """The agents' state for ``num_envs`` copies starting new episodes (zeros; None for
        feed-forward agents)."""
        return self._zero_memory(num_envs) if self.config.recurrent else None

    def reset_memory(self, memory: M | None, ended: NDArray[np.bool_]) -> M | None:
        """``memory`` with the copies whose episode ended set back to zero."""
        if memory is None or not ended.any():
            return memory
        return self._keep_memory(memory, (~ended).astype(np.float32))

    def _explore(self, greedy: NDArray[Any], avail: NDArray[np.float32]) -> NDArray[np.int64]:
        """Epsilon-greedy over ``greedy`` at the current epsilon; counts the exploring steps."""
        epsilon = epsilon_at(self.config, self.explore_steps)
        self.explore_steps += greedy.shape[0]
        return epsilon_greedy(greedy, avail, epsilon, self.exploration)

    def explore_step(
        self, observation: Observation, memory: M | None
    ) -> tuple[NDArray[Any], M | None]:
        """Epsilon-greedy actions of the training copies from ``memory`` (the off-policy runner's
        recurrent path); returns them and the memory after the step."""
        greedy, memory = self._greedy_actions(observation, memory)
        return self._explore(greedy, observation.avail_actions), memory

    def act(self, observation: Observation, *, explore: bool) -> NDArray[Any]:
        """Greedy actions; with ``explore``, each agent acts uniformly at random over its
        available actions with probability epsilon (which decays with the exploring steps). A
        recurrent policy carries its own state between calls (``end_episodes`` clears it)."""
        num_envs = observation.obs.shape[0]
        memory = self._act_memory
        if self.config.recurrent and (memory is None or _rows(memory) != num_envs):
            self._act_memory = self.initial_memory(num_envs)
        greedy, self._act_memory = self._greedy_actions(observation, self._act_memory)
        if not explore:
            return greedy
        return self._explore(greedy, observation.avail_actions)

    def end_episodes(self, ended: NDArray[np.bool_]) -> None:
        """Forget ``act``'s state for the copies whose episode ended (all of it when ``ended``
        is for another number of copies: ``act`` starts them afresh)."""
        if self._act_memory is not None and _rows(self._act_memory) != len(ended):
            self._act_memory = None
        self._act_memory = self.reset_memory(self._act_memory, ended)

    # -- learning -----------------------------------------------------------------------------

    def update(self, batch: ReplayBatch | EpisodeBatch) -> WQMIXStats:
        """One gradient step of both losses on ``batch`` (any size: ids come from its shape):
        transitions, or whole episodes for recurrent agents; then the target sync when due."""
        cfg = self.config
        if cfg.weighting not in ("ow", "cw"):
            # Past validation (a stored config of an older version): refuse, never train with
            # uniform weights (reference defect wqmix-weighting-and-central-loss), and before any
            # graph is compiled.
            raise ValueError(f"unknown WQMIX weighting {cfg.weighting!r}: expected 'ow' or 'cw'")
        if cfg.recurrent:
            if not isinstance(batch, EpisodeBatch):
                raise TypeError("recurrent WQMIX trains on an EpisodeBatch")
            stats = self._episode_update(batch)
        else:
            if isinstance(batch, EpisodeBatch):
                raise TypeError("feed-forward WQMIX trains on a ReplayBatch")
            stats = self._transition_update(batch)
        self.updates += 1
        if self.updates % cfg.target_update_interval == 0:
            self._sync_targets()
        return WQMIXStats(**stats, epsilon=epsilon_at(cfg, self.explore_steps))

    # -- checkpoints ----------------------------------------------------------------------------

    def policy_tensor_names(self) -> list[str]:
        """The tensors a policy-only checkpoint needs: the QMIX agents'."""
        return sorted(self._module_state("agent"))

    def state(self) -> dict[str, NDArray[Any]]:
        """Every network, the live ones' Adam moments, the exploration generator, the counters."""
        tensors: dict[str, NDArray[Any]] = {}
        for name in (*LIVE, *TARGETS):
            tensors.update(self._module_state(name))
        for name in LIVE:
            tensors.update(self._optimizer_state(name))
        tensors["rng/exploration"] = rng.state_tensor(self.exploration)
        tensors["counters/updates"] = np.array(self.updates, np.int64)
        tensors["counters/explore_steps"] = np.array(self.explore_steps, np.int64)
        return tensors

    def load_state(self, tensors: Mapping[str, NDArray[Any]], *, policy_only: bool = False) -> None:
        """Restore ``state()``'s tensors (only the QMIX agents' with ``policy_only``)."""
        self._act_memory = None  # a loaded policy starts its next episode afresh
        self._load_module("agent", tensors)
        if policy_only:
            return
        for name in (*LIVE[1:], *TARGETS):
            self._load_module(name, tensors)
        for name in LIVE:
            self._load_optimizer(name, tensors)
        rng.restore(self.exploration, tensors["rng/exploration"])
        self.updates = int(tensors["counters/updates"])
        self.explore_steps = int(tensors["counters/explore_steps"])


def _rows(memory: Any) -> int:
    """The number of env copies a memory tensor holds (its first axis)."""
    return int(memory.shape[0])
