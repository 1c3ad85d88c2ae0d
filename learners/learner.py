"""What every learner class in the registry is, whatever its algorithm and backend.

The registry names learner classes by import path; ``learners.training`` builds one as
``cls(config, info, device, seed)`` and hands it to the runner of its algorithm's kind. The runners
add what they need on top (``OffPolicyLearner.update`` in ``learners.runners.off_policy``; the
on-policy runner defines its own).

State crosses the boundary as NumPy arrays under the canonical names of ``learners.checkpoint``
(PyTorch layout), so a checkpoint written by one backend can be read by another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, Observation


class Learner(Protocol):
    """A learner: networks, optimisers and the random state of its exploration."""

    def __init__(self, config: Any, info: EnvInfo, device: str, seed: int) -> None:
        """Build the networks for ``info``'s spaces on ``device``, initialised from ``seed``."""

    def act(self, observation: Observation, *, explore: bool) -> NDArray[Any]:
        """Actions for a batched observation: continuous (E, N, action_dim) in [-1, 1], or discrete
        (E, N) integers. ``explore=False`` is the deterministic policy (evaluation, replays)."""
        ...

    def state(self) -> dict[str, NDArray[Any]]:
        """Everything needed to resume: networks, targets, optimisers, random state, counters."""
        ...

    def load_state(self, tensors: Mapping[str, NDArray[Any]], *, policy_only: bool = False) -> None:
        """Restore ``state()``'s tensors; ``policy_only``: just ``policy_tensor_names()``."""

    def policy_tensor_names(self) -> list[str]:
        """The names of the tensors acting needs (what ``load_policy`` reads)."""
        ...


@runtime_checkable
class EpisodicMemory(Protocol):
    """A learner whose ``act`` carries state from call to call (a recurrent policy's GRU state):
    whoever steps the env tells it where episodes end, so no state leaks into the next episode."""

    def end_episodes(self, ended: NDArray[np.bool_]) -> None:
        """Forget the state of the copies whose episode ended (``ended`` is (E,) booleans)."""
