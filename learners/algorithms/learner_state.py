"""What a backend converts for a learner's portable checkpoint.

Every learner's checkpoint holds its networks' parameters and its Adams' moments under canonical
names with PyTorch's layout (``docs/backends.md``); only a backend knows how to read them out of
its framework and write them back. The host-side learners (``ppo_learner.PPOLearner``,
``ddpg.DDPGLearner``) lay the checkpoint out and ask their backend for these four conversions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from numpy.typing import NDArray


class NetworkState(ABC):
    """The conversions between a backend's networks and optimisers and checkpoint tensors."""

    @abstractmethod
    def _module_state(self, name: str) -> dict[str, NDArray[Any]]:
        """Network ``name``'s parameters under their canonical names (``<name>.<param>``)."""

    @abstractmethod
    def _optimizer_state(self, name: str) -> dict[str, NDArray[Any]]:
        """The Adam moments of network ``name`` (``optim/<name>/...``; none before a step)."""

    @abstractmethod
    def _load_module(self, name: str, tensors: Mapping[str, NDArray[Any]]) -> None:
        """Assign network ``name``'s parameters from ``tensors`` (checked names and shapes)."""

    @abstractmethod
    def _load_optimizer(self, name: str, tensors: Mapping[str, NDArray[Any]]) -> None:
        """Restore the Adam moments of network ``name`` (none present: a fresh Adam)."""

    def policy_tensor_names(self) -> list[str]:
        """The tensors a policy-only checkpoint needs: the actor's."""
        return sorted(self._module_state("actor"))
