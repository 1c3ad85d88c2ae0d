"""The portable checkpoint: one safetensors file that every backend writes and reads.

Tensors are stored under canonical names in PyTorch's layout whatever the backend that wrote them
(a ``Linear`` weight is ``(out, in)``): ``actor.layers.0.weight``, ``target_critic.layers.2.bias``,
Adam's moments under ``optim/<net>/<param>/exp_avg`` and ``.../exp_avg_sq`` with the step count at
``optim/<net>/step``, random generator states under ``rng/...``, the replay buffer under
``replay/...``. A JSON manifest sits in the safetensors header (``__metadata__["marlforge"]``): the
format version, algorithm, backend, the full spec, the env's spaces, the env step it was taken at,
the runner's counters, and which backends can resume it or load its policy.

The file is everything a run needs to continue exactly; ``learners.policy.load_policy`` reads
only the actor from it, and ``learners.exports.export_policy`` writes a file of the actor alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np
import safetensors
import safetensors.numpy
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, JsonValue, model_validator

from learners.enums import Algorithm, Backend
from learners.envs.base import EnvInfo

FORMAT_VERSION = 1
MANIFEST_KEY = "marlforge"
Tensors = dict[str, NDArray[Any]]


# Hyperparameters added after checkpoints were written without them, with the value their absence
# meant: until 2026-12-06 a team's groups shared one set of networks (``share_across_groups``),
# so a manifest whose spec does not name it was trained with ``true``. Only the algorithms whose
# config has the field (migration 0020 fills it into the database's stored specs likewise).
LEGACY_HYPERPARAMETERS: dict[str, dict[str, JsonValue]] = {
    algorithm: {"share_across_groups": True}
    for algorithm in (Algorithm.IPPO, Algorithm.MAPPO, Algorithm.MADDPG, Algorithm.WQMIX)
}


class CheckpointError(ValueError):
    """A file that is not a MARLForge checkpoint, or one this code cannot use as asked."""


class Manifest(BaseModel):
    """What a checkpoint holds, readable without loading its tensors."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = FORMAT_VERSION
    algorithm: Algorithm
    backend: Backend
    """The backend that wrote the file."""
    spec: dict[str, JsonValue]
    """The run's full ``ExperimentSpec`` (defaults filled in)."""
    env: dict[str, JsonValue]
    """The env's ``EnvInfo``: enough to rebuild the networks without making the env."""
    step: int
    """Environment steps taken when the checkpoint was written."""
    runner: dict[str, JsonValue]
    """The runner's counters (episode indices, update count...) needed to resume exactly."""
    resumable_on: list[Backend]
    """Backends that can resume training from this file (optimiser state included)."""
    policy_backends: list[Backend]
    """Backends that can load the policy for acting (``load_policy``)."""
    contents: Literal["training", "policy"] = "training"
    """``training``: everything the run resumes from. ``policy``: a policy-only export
    (``learners.exports``), the policy's networks alone: it acts and cannot resume."""
    network: dict[str, JsonValue] | None = None
    """Policy exports: the acting network written out as data (``learners.exports.layout``;
    docs/using-results.md#the-layout), enough to rebuild the policy with NumPy alone."""

    @model_validator(mode="before")
    @classmethod
    def _legacy_hyperparameters(cls, data: Any) -> Any:
        """A spec written before a hyperparameter existed reads with the value its run had."""
        if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
            return data
        legacy = LEGACY_HYPERPARAMETERS.get(str(data.get("algorithm")), {})
        given = data["spec"].get("hyperparameters")
        if not legacy or not isinstance(given, dict) or legacy.keys() <= given.keys():
            return data
        hyperparameters = {**legacy, **given}
        return {**data, "spec": {**data["spec"], "hyperparameters": hyperparameters}}


def env_info_to_json(info: EnvInfo) -> dict[str, JsonValue]:
    """``EnvInfo`` as plain JSON values."""
    out: dict[str, JsonValue] = {}
    for key, value in asdict(info).items():
        if isinstance(value, np.ndarray):
            out[key] = [float(v) for v in value]
        elif isinstance(value, tuple):
            out[key] = list(value)
        else:
            out[key] = value
    return out


def env_info_from_json(data: Mapping[str, Any]) -> EnvInfo:
    """The inverse of ``env_info_to_json``. A manifest written before teams were recorded has no
    ``teams``: every agent is then on one team, ``agent`` (the networks of such a run were
    shared by all its agents whatever their side)."""
    agent_ids = tuple(data["agent_ids"])
    teams = tuple(data["teams"]) if "teams" in data else ("agent",) * len(agent_ids)
    bounds = {
        key: None if data[key] is None else np.asarray(data[key], np.float32)
        for key in ("action_low", "action_high")
    }
    return EnvInfo(
        num_envs=int(data["num_envs"]),
        num_agents=int(data["num_agents"]),
        agent_ids=agent_ids,
        teams=teams,
        obs_dim=int(data["obs_dim"]),
        obs_dims=tuple(int(d) for d in data["obs_dims"]),
        state_dim=int(data["state_dim"]),
        action_kind=str(data["action_kind"]),
        action_dim=int(data["action_dim"]),
        action_low=bounds["action_low"],
        action_high=bounds["action_high"],
        max_episode_steps=data["max_episode_steps"],
        groups=tuple(data.get("groups", ())),
        action_dims=tuple(int(d) for d in data.get("action_dims", ())),
    )


def same_env(manifest_env: Mapping[str, Any], info: EnvInfo) -> bool:
    """Whether a checkpoint's ``manifest.env`` describes the env ``info``, field for field. The
    teams, groups and per-agent action sizes are compared only when the manifest records them:
    they label the agents without changing any tensor, so a checkpoint from before they were
    recorded resumes on its env."""
    current = env_info_to_json(info)
    for recorded_later in ("teams", "groups", "action_dims"):
        if recorded_later not in manifest_env:
            current.pop(recorded_later)
    return dict(manifest_env) == current


def same_spaces(manifest_env: Mapping[str, Any], info: EnvInfo) -> str | None:
    """How a checkpoint's ``manifest.env`` and the env ``info`` differ in what shapes or labels
    the networks (agents, teams, observation, state and action spaces), or None when they agree:
    the number of copies and the time limit may differ (what a warm start may change)."""
    current = env_info_to_json(info)
    for key in ("num_envs", "max_episode_steps"):
        current.pop(key)
    for key, value in current.items():
        if key in ("teams", "groups", "action_dims") and key not in manifest_env:
            continue
        if manifest_env.get(key) != value:
            return f"its {key} is {manifest_env.get(key)}, this run's {value}"
    return None


def write(path: Path | str, tensors: Mapping[str, NDArray[Any]], manifest: Manifest) -> None:
    """Write one checkpoint file at ``path`` (the caller makes it atomic: temp file + rename)."""
    # (np.ascontiguousarray would turn 0-d counters into 1-d arrays.)
    arrays = {name: np.require(value, requirements="C") for name, value in tensors.items()}
    metadata = {MANIFEST_KEY: manifest.model_dump_json()}
    try:
        safetensors.numpy.save_file(arrays, str(path), metadata=metadata)
    except safetensors.SafetensorError as exc:
        # safetensors reports a full or failing disk as its own error: say it is the file's.
        raise OSError(f"writing {Path(path).name} failed: {exc}") from exc


def read_manifest(path: Path | str) -> Manifest:
    """The manifest of the checkpoint at ``path``, read from the header only."""
    try:
        with safetensors.safe_open(str(path), framework="np") as handle:
            metadata = handle.metadata() or {}
    except (OSError, safetensors.SafetensorError) as exc:
        raise CheckpointError(f"{path} is not a safetensors file: {exc}") from exc
    if MANIFEST_KEY not in metadata:
        raise CheckpointError(f"{path} has no MARLForge manifest")
    manifest = Manifest.model_validate(json.loads(metadata[MANIFEST_KEY]))
    if manifest.format_version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format {manifest.format_version}; this code reads up to "
            f"{FORMAT_VERSION}"
        )
    return manifest


def read(path: Path | str) -> tuple[Tensors, Manifest]:
    """Every tensor and the manifest of the checkpoint at ``path``."""
    manifest = read_manifest(path)
    return dict(safetensors.numpy.load_file(str(path))), manifest
