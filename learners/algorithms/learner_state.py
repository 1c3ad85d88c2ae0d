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
    """The conversions between a backend's networks and optimisers and checkpoint tensors.

    Each backend implements them once (``<backend>.networks.<Backend>State``) over ``_network``
    and ``_optimizer``, which find a learner's network and Adam by name: ``self.nets[name]`` and
    ``self.optimizers[name]`` unless a learner keeps them elsewhere and says so."""

    nets: Any
    optimizers: Any

    def _network(self, name: str) -> Any:
        """Network ``name`` of this learner."""
        return self.nets[name]

    def _optimizer(self, name: str) -> Any:
        """The Adam that trains network ``name``."""
        return self.optimizers[name]

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


class SelfSerialisingOptimizers(NetworkState):
    """For backends whose Adam converts its own moments (``TorchAdam.state``/``load_state``:
    TensorFlow's and MindSpore's)."""

    def _optimizer_state(self, name: str) -> dict[str, NDArray[Any]]:
        return self._optimizer(name).state(name, name)  # type: ignore[no-any-return]

    def _load_optimizer(self, name: str, tensors: Mapping[str, NDArray[Any]]) -> None:
        self._optimizer(name).load_state(name, name, tensors)
