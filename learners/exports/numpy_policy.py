"""A policy run by NumPy alone from its layout (``learners.exports.layout``): what the API's
inference route acts with, since the API imports no deep-learning framework. The arithmetic is
float32, the layout's steps in order; the memory of a recurrent policy is passed in and handed
back (a service keeps no state between requests)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import safetensors
from numpy.typing import NDArray

from learners.checkpoint import CheckpointError, Manifest, env_info_from_json, read_manifest
from learners.envs.base import EnvInfo, Observation
from learners.exports.env_io import EnvInputError, to_env_actions, to_observation
from learners.exports.layout import layout_tensors, network_layout

Array = NDArray[np.float32]


@dataclass(frozen=True)
class _Linear:
    weight: Array  # (in, out): transposed once, at load
    bias: Array

    def __call__(self, x: Array) -> Array:
        out: Array = x @ self.weight + self.bias
        return out


def _sigmoid(x: Array) -> Array:
    out: Array = 1.0 / (1.0 + np.exp(-x))
    return out


class NumpyPolicy:
    """The greedy policy of a checkpoint or export, compiled from its layout into NumPy arrays."""

    def __init__(self, manifest: Manifest, tensors: Mapping[str, NDArray[Any]]) -> None:
        self.manifest = manifest
        self.info: EnvInfo = env_info_from_json(manifest.env)
        self.layout: dict[str, Any] = dict(manifest.network or network_layout(manifest))
        missing = sorted(layout_tensors(self.layout) - set(tensors))
        if missing:
            raise CheckpointError(f"the policy lacks the tensors {missing}")
        self._cache: dict[tuple[str, int | None], _Linear] = {}
        self._agents = [
            [self._compile(step, tensors) for step in agent["steps"]]
            for agent in self.layout["agents"]
        ]
        memory = self.layout.get("memory")
        self.memory_size: int | None = int(memory["shape"][2]) if memory else None
        output = self.layout["output"]
        self.discrete = output["kind"] == "discrete"
        self._own = np.zeros((self.info.num_agents, int(output["actions"])), bool)
        for j, size in enumerate(output["sizes"]):
            self._own[j, :size] = True
        self._masked = np.float32(output.get("masked_value", 0.0))

    @classmethod
    def load(cls, path: Path | str) -> NumpyPolicy:
        """The policy in the checkpoint or export at ``path``: only its layout's tensors are
        read."""
        manifest = read_manifest(path)
        names = layout_tensors(dict(manifest.network or network_layout(manifest)))
        with safetensors.safe_open(str(path), framework="np") as handle:
            present = set(handle.keys())
            if not names <= present:
                raise CheckpointError(f"{path} lacks the policy tensors {sorted(names - present)}")
            tensors = {name: handle.get_tensor(name) for name in names}
        return cls(manifest, tensors)

    @property
    def nbytes(self) -> int:
        """The bytes of the arrays it holds."""
        return sum(lin.weight.nbytes + lin.bias.nbytes for lin in self._cache.values())

    def _linear(self, step: Mapping[str, Any], tensors: Mapping[str, NDArray[Any]]) -> _Linear:
        row = step.get("row")
        key = (step["weight"], row)
        if key not in self._cache:
            weight = np.asarray(tensors[step["weight"]], np.float32)
            bias = np.asarray(tensors[step["bias"]], np.float32)
            if row is not None:
                weight, bias = weight[row], bias[row]
            self._cache[key] = _Linear(np.ascontiguousarray(weight.T), np.array(bias))
        return self._cache[key]

    def _compile(self, step: Mapping[str, Any], tensors: Mapping[str, NDArray[Any]]) -> Any:
        op = step["op"]
        if op == "linear":
            return ("linear", self._linear(step, tensors))
        if op == "gru":
            return (
                "gru",
                self._linear(step["input"], tensors),
                self._linear(step["hidden"], tensors),
            )
        if op == "one_hot":
            return ("one_hot", int(step["index"]), int(step["width"]))
        if op in ("relu", "tanh"):
            return (op,)
        raise CheckpointError(f"the layout has an unknown step {op!r}")

    def forward(
        self, obs: Array, avail: Array | None = None, memory: Array | None = None
    ) -> tuple[NDArray[Any], Array | None]:
        """The greedy actions for ``obs`` (B, N, obs_dim): (B, N) ints or (B, N, A) in [-1, 1],
        and, recurrent, the memory after the step ((B, N, H); zeros when ``memory`` is None)."""
        obs = np.asarray(obs, np.float32)
        batch = obs.shape[0]
        if self.memory_size is not None and memory is None:
            memory = np.zeros((batch, self.info.num_agents, self.memory_size), np.float32)
        outputs, states = [], []
        for i, steps in enumerate(self._agents):
            x = obs[:, i]
            for step in steps:
                kind = step[0]
                if kind == "linear":
                    x = step[1](x)
                elif kind == "relu":
                    x = np.maximum(x, np.float32(0.0))
                elif kind == "tanh":
                    x = np.tanh(x)
                elif kind == "one_hot":
                    ids = np.zeros((batch, step[2]), np.float32)
                    ids[:, step[1]] = 1.0
                    x = np.concatenate([x, ids], axis=-1)
                else:  # gru
                    assert memory is not None
                    h = np.asarray(memory[:, i], np.float32)
                    x_r, x_z, x_n = np.split(step[1](x), 3, axis=-1)
                    h_r, h_z, h_n = np.split(step[2](h), 3, axis=-1)
                    r, z = _sigmoid(x_r + h_r), _sigmoid(x_z + h_z)
                    n = np.tanh(x_n + r * h_n)
                    x = (np.float32(1.0) - z) * n + z * h
                    states.append(x)
            outputs.append(x)
        out = np.stack(outputs, axis=1).astype(np.float32)
        after = np.stack(states, axis=1).astype(np.float32) if states else None
        if not self.discrete:
            return np.clip(out, -1.0, 1.0), after
        available = self._own if avail is None else (np.asarray(avail) > 0.5) & self._own
        return np.argmax(np.where(available, out, self._masked), axis=-1), after

    def act(
        self,
        observations: Any,
        action_masks: Mapping[str, Any] | None = None,
        memory: Array | None = None,
    ) -> tuple[Any, Array | None]:
        """Actions in the env's own space for what an env returns (``learners.exports.env_io``:
        a dict of per-agent observations or an array, one env or a batch), and the memory after
        the step for a recurrent policy. ``EnvInputError`` names what does not fit."""
        if isinstance(observations, Observation):
            return self.forward(observations.obs, observations.avail_actions, memory)
        batch, batched, as_dict = to_observation(self.info, observations, action_masks)
        if memory is not None:
            expected = (batch.obs.shape[0], self.info.num_agents, self.memory_size)
            if self.memory_size is None:
                raise EnvInputError("this policy is not recurrent: it takes no memory")
            if tuple(np.shape(memory)) != expected:
                raise EnvInputError(f"memory of shape {np.shape(memory)}, expected {expected}")
        chosen, after = self.forward(batch.obs, batch.avail_actions, memory)
        present = observations if as_dict else None
        return to_env_actions(self.info, chosen, batched, as_dict, present), after
