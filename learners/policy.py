"""A trained policy out of a checkpoint: ``load_policy`` builds the algorithm's learner for the
checkpoint's spec and env, loads only the actor's tensors into it, and returns a ``Policy`` that
acts greedily (no exploration noise, the mode of a distribution)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import safetensors
from numpy.typing import NDArray

from learners.backends import resolve_device
from learners.checkpoint import CheckpointError, Manifest, env_info_from_json, read_manifest
from learners.enums import Backend, Device
from learners.envs.base import EnvInfo, Observation
from learners.exports.env_io import to_env_actions, to_observation
from learners.learner import EpisodicMemory
from learners.registry import entry
from learners.spec import ExperimentSpec


class Policy(Protocol):
    """A trained policy that acts greedily (no exploration noise, the mode of a distribution)."""

    info: EnvInfo
    manifest: Manifest

    def act(self, observation: Any, action_masks: Mapping[str, Any] | None = None) -> Any:
        """Actions for ``observation``. A batched ``Observation``: (E, N, action_dim) in [-1, 1],
        or (E, N) ints. What an env returns (a PettingZoo-style dict of per-agent observations, or
        an array; one env or a batch; ``action_masks`` per agent for discrete actions): actions in
        the env's own space, a dict per agent for a dict (``learners.exports.env_io``)."""
        ...

    def end_episodes(self, ended: NDArray[np.bool_]) -> None:
        """Forget what a recurrent policy carried for the copies whose episode ended ((E,)
        booleans); nothing to forget for a feed-forward one."""
        ...


class _LearnerPolicy:
    def __init__(self, learner: Any, info: EnvInfo, manifest: Manifest) -> None:
        self._learner = learner
        self.info = info
        self.manifest = manifest

    def act(self, observation: Any, action_masks: Mapping[str, Any] | None = None) -> Any:
        if isinstance(observation, Observation):
            actions: NDArray[Any] = self._learner.act(observation, explore=False)
            return actions
        batch, batched, as_dict = to_observation(self.info, observation, action_masks)
        chosen = self._learner.act(batch, explore=False)
        present = observation if as_dict else None
        return to_env_actions(self.info, np.asarray(chosen), batched, as_dict, present)

    def end_episodes(self, ended: NDArray[np.bool_]) -> None:
        if isinstance(self._learner, EpisodicMemory):
            self._learner.end_episodes(ended)


def load_policy(
    path: Path | str, backend: Backend | str | None = None, device: Device | str = Device.CPU
) -> Policy:
    """The deterministic policy in the checkpoint at ``path``, run by ``backend`` (default: the
    backend that wrote it) on ``device``. Only the policy's tensors are loaded."""
    manifest = read_manifest(path)
    chosen = Backend(backend) if backend is not None else manifest.backend
    if chosen not in manifest.policy_backends:
        raise CheckpointError(
            f"the policy in {path} can be loaded by {', '.join(manifest.policy_backends)}, "
            f"not by {chosen}"
        )
    spec = ExperimentSpec.model_validate(manifest.spec)
    info = env_info_from_json(manifest.env)
    learner_cls = entry(manifest.algorithm).learner_class(chosen)
    learner = learner_cls(spec.config(), info, resolve_device(chosen, Device(device)), spec.seed)
    names = learner.policy_tensor_names()
    with safetensors.safe_open(str(path), framework="np") as handle:
        missing = [n for n in names if n not in set(handle.keys())]
        if missing:
            raise CheckpointError(f"{path} lacks the policy tensors {missing}")
        tensors = {n: handle.get_tensor(n) for n in names}
    expected = learner.state()
    wrong = [
        f"{n} {tuple(t.shape)} (this code builds {tuple(expected[n].shape)})"
        for n, t in tensors.items()
        if tuple(t.shape) != tuple(expected[n].shape)
    ]
    if wrong:
        # e.g. a multi-team run written when one network served both teams
        raise CheckpointError(f"{path} holds networks of another layout: {', '.join(wrong)}")
    learner.load_state(tensors, policy_only=True)
    return _LearnerPolicy(learner, info, manifest)
