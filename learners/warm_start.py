"""Warm starts (``spec.init``): a run whose learner begins from another run's checkpoint.

``what: policy`` loads the acting network (``Learner.policy_tensor_names``: the actor, WQMIX's
agent network) and the target copy of it where the learner keeps one (DDPG's and MADDPG's
``target_actor``), so the target starts at the policy it tracks; every other network and the
optimisers start as a fresh run's do. ``what: all`` loads every network and target, the
optimisers' moments and step counts, and PPO's value normaliser.

Never loaded: the learner's generators (``rng/...``) and counters (``counters/...``: updates,
WQMIX's exploration schedule), which a warm-started run draws from its own seed as a fresh run
does, and what the runner keeps (its replay buffer, its generator): the run is a new one, on its
own step axis from 0. The checks here are the exact ones (every tensor's name and shape); the API
checks the spec's fit at submission without building anything
(``learners.admission.warm_fit``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from learners import checkpoint
from learners.checkpoint import CheckpointError, Manifest, Tensors
from learners.envs.base import EnvInfo
from learners.learner import Learner
from learners.spec import ExperimentSpec

OWN_PREFIXES = ("rng/", "counters/")
"""State a warm-started run keeps as its own seed made it."""


class WarmStartError(CheckpointError):
    """A checkpoint the run cannot start from: another algorithm, backend it cannot load, env of
    other spaces, or networks of other shapes."""


def check_fit(manifest: Manifest, spec: ExperimentSpec, info: EnvInfo, what: str) -> None:
    """Raise ``WarmStartError`` unless a run of ``spec`` on an env of ``info`` can start from a
    checkpoint with ``manifest``, taking ``what``."""
    if manifest.contents != "training":
        raise WarmStartError("the checkpoint is a policy-only export, not a run's checkpoint")
    if manifest.algorithm != spec.algorithm:
        raise WarmStartError(
            f"the checkpoint holds a {manifest.algorithm} run, not {spec.algorithm}"
        )
    loads = manifest.policy_backends if what == "policy" else manifest.resumable_on
    if spec.backend not in loads:
        raise WarmStartError(
            f"{spec.backend} cannot load {what} from the checkpoint (it loads on "
            f"{', '.join(loads)})"
        )
    if (difference := checkpoint.same_spaces(manifest.env, info)) is not None:
        raise WarmStartError(f"the checkpoint was taken on an env of other spaces: {difference}")


def _taken(parent: Mapping[str, NDArray[Any]], name: str, own: NDArray[Any]) -> NDArray[Any]:
    if name not in parent:
        raise WarmStartError(f"the checkpoint has no tensor {name} (networks of another layout)")
    tensor = parent[name]
    if tensor.shape != own.shape:
        raise WarmStartError(
            f"{name} is {tuple(tensor.shape)} in the checkpoint, {tuple(own.shape)} in this run "
            "(networks of other sizes)"
        )
    return tensor


def warm_tensors(learner: Learner, parent: Mapping[str, NDArray[Any]], what: str) -> Tensors:
    """The state to load into a fresh ``learner``: its own, with what a warm start of ``what``
    takes from the checkpoint's tensors ``parent`` (names and shapes checked)."""
    own = learner.state()
    merged: Tensors = dict(own)
    if what == "policy":
        for name in learner.policy_tensor_names():
            merged[name] = _taken(parent, name, own[name])
            if (target := f"target_{name}") in own:
                merged[target] = merged[name]
        return merged
    for name, tensor in own.items():
        if not name.startswith(OWN_PREFIXES + ("optim/",)):
            merged[name] = _taken(parent, name, tensor)
    # A fresh optimiser has no moments yet: the checkpoint's come whole (the backend checks them).
    merged = {name: tensor for name, tensor in merged.items() if not name.startswith("optim/")}
    merged.update({name: t for name, t in parent.items() if name.startswith("optim/")})
    return merged


def warm_start(learner: Learner, path: Path, spec: ExperimentSpec, info: EnvInfo) -> Manifest:
    """Load what ``spec.init`` takes from the checkpoint at ``path`` into a fresh ``learner``;
    the checkpoint's manifest."""
    if spec.init is None:
        raise ValueError("the spec has no init")
    tensors, manifest = checkpoint.read(path)
    check_fit(manifest, spec, info, spec.init.what)
    learner.load_state(warm_tensors(learner, tensors, spec.init.what))
    return manifest
