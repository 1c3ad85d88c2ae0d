"""TensorFlow networks whose variables carry the checkpoint's canonical names; state helpers.

A variable is stored the way TensorFlow computes with it: a dense kernel is ``(in, out)`` (Keras'
layout, ``y = x @ kernel + bias``), a per-agent kernel ``(N, in, out)``. The portable checkpoint
holds PyTorch's layout (``(out, in)`` and ``(N, out, in)``), so every ``Param`` knows whether its
value is transposed on the way out and back in; nothing else in the backend deals with layouts.

``MLP`` mirrors ``learners.backends.torch.networks.MLP`` name for name: its Linear layers sit at the
even indices of ``layers`` (activations at the odd ones), so ``actor.layers.2.weight`` is the
second layer in both backends. Initial weights come from a NumPy generator (the checkpoint, not the
initialiser, is what makes two backends start from the same weights; the scheme is still the usual
one: PyTorch's default uniform fan-in bound, DDPG's small output layer, orthogonal for PPO).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
from numpy.typing import NDArray

from learners.algorithms.learner_state import SelfSerialisingOptimizers
from learners.envs.teams import team_slots


@dataclass(frozen=True)
class Param:
    """One trainable tensor: its canonical name (without the network prefix) and its variable."""

    name: str
    variable: tf.Variable
    transposed: bool
    """True for kernels: the variable's last two axes are swapped relative to the checkpoint."""

    def to_canonical(self, value: NDArray[Any]) -> NDArray[Any]:
        """A value shaped like the variable, in PyTorch's layout."""
        return np.ascontiguousarray(np.swapaxes(value, -1, -2) if self.transposed else value)

    def from_canonical(self, value: NDArray[Any]) -> NDArray[Any]:
        """A value in PyTorch's layout, shaped like the variable."""
        value = np.asarray(value)
        return np.swapaxes(value, -1, -2) if self.transposed else value


def _variable(value: NDArray[Any], name: str, trainable: bool) -> tf.Variable:
    return tf.Variable(
        np.asarray(value, np.float32), trainable=trainable, name=name.replace(".", "_")
    )


class Dense(tf.Module):
    """``y = x @ kernel + bias`` for inputs ``(..., in)``; canonical ``weight`` is ``kernel.T``.

    ``per_agent`` makes it a per-agent layer: ``kernel`` is ``(N, in, out)``, ``bias`` is
    ``(N, out)``, and inputs are ``(..., N, in)``: each agent's slice meets its own weight, in
    one batched contraction. ``groups`` (each agent's team index) makes it a per-team layer:
    ``kernel`` is ``(T, in, out)`` and each agent meets its team's.
    """

    def __init__(
        self,
        name: str,
        kernel: NDArray[Any],
        bias: NDArray[Any],
        *,
        per_agent: bool = False,
        groups: Sequence[int] | None = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(name=name.replace(".", "_"))
        self.per_agent = per_agent or groups is not None
        # Each agent's team index when the kernels are one per team, (T, in, out).
        self.groups = None if groups is None else tf.constant(tuple(groups), tf.int32)
        self.kernel = _variable(kernel, f"{name}.weight", trainable)
        self.bias = _variable(bias, f"{name}.bias", trainable)
        self.params = [
            Param(f"{name}.weight", self.kernel, transposed=True),
            Param(f"{name}.bias", self.bias, transposed=False),
        ]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        if self.groups is not None:  # each agent meets its team's kernel
            kernel, bias = tf.gather(self.kernel, self.groups), tf.gather(self.bias, self.groups)
            return tf.einsum("...ni,nio->...no", x, kernel) + bias
        if self.per_agent:
            return tf.einsum("...ni,nio->...no", x, self.kernel) + self.bias
        # A 2-D matmul over flattened leading axes (what torch's linear does for N-D inputs).
        flat = tf.reshape(x, [-1, tf.shape(x)[-1]])
        y = tf.matmul(flat, self.kernel) + self.bias
        return tf.reshape(y, tf.concat([tf.shape(x)[:-1], tf.shape(self.kernel)[-1:]], 0))


def fan_in_uniform(
    rng: np.random.Generator, in_dim: int, out_dim: int, bound: float | None = None
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """PyTorch's default Linear init (U(-1/sqrt(in), 1/sqrt(in))), or U(-bound, bound); kernels
    ``(in, out)``."""
    limit = 1.0 / math.sqrt(in_dim) if bound is None else bound
    kernel = rng.uniform(-limit, limit, (in_dim, out_dim)).astype(np.float32)
    return kernel, rng.uniform(-limit, limit, (out_dim,)).astype(np.float32)


def orthogonal(
    rng: np.random.Generator, in_dim: int, out_dim: int, gain: float
) -> NDArray[np.float32]:
    """An ``(in, out)`` kernel, orthonormal rows or columns (Saxe et al., 2014), times ``gain``."""
    flat = rng.standard_normal((max(in_dim, out_dim), min(in_dim, out_dim)))
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))  # a uniform draw over the orthogonal group, not QR's biased one
    kernel = q if in_dim >= out_dim else q.T
    return (gain * kernel).astype(np.float32)


class MLP(tf.Module):
    """Dense layers with ReLU between them; ``tanh_output`` squashes into [-1, 1]. Canonical names:
    ``layers.<2i>.weight`` / ``.bias`` as in the torch ``MLP``'s ``nn.Sequential``."""

    def __init__(
        self,
        in_dim: int,
        hidden_sizes: Sequence[int],
        out_dim: int,
        rng: np.random.Generator,
        *,
        tanh_output: bool = False,
        output_scale: float | None = None,
        trainable: bool = True,
    ) -> None:
        super().__init__()
        self.tanh_output = tanh_output
        sizes = [in_dim, *hidden_sizes, out_dim]
        self.layers: list[Dense] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            last = i == len(sizes) - 2
            kernel, bias = fan_in_uniform(rng, a, b, output_scale if last else None)
            self.layers.append(Dense(f"layers.{2 * i}", kernel, bias, trainable=trainable))
        self.params = [p for layer in self.layers for p in layer.params]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        for layer in self.layers[:-1]:
            x = tf.nn.relu(layer(x))
        x = self.layers[-1](x)
        return tf.tanh(x) if self.tanh_output else x


class PerAgentMLP(tf.Module):
    """One ``MLP`` per agent (canonical names ``agents.<i>.layers...``, as the torch
    ``PerAgentMLP``): (B, N, in) -> (B, N, out), agent ``i``'s rows through network ``i``."""

    def __init__(
        self,
        num_agents: int,
        in_dim: int,
        hidden_sizes: Sequence[int],
        out_dim: int,
        rng: np.random.Generator,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.agents = [MLP(in_dim, hidden_sizes, out_dim, rng, **kwargs) for _ in range(num_agents)]
        self.params = [
            Param(f"agents.{i}.{p.name}", p.variable, p.transposed)
            for i, net in enumerate(self.agents)
            for p in net.params
        ]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.stack([net(x[:, i]) for i, net in enumerate(self.agents)], axis=1)


class PerTeamMLP(tf.Module):
    """One ``MLP`` per team (canonical names ``teams.<k>.layers...``, as the torch
    ``PerTeamMLP``), shared by the team's agents, told apart by a one-hot id within the team:
    (B, N, in) -> (B, N, out). ``teams`` lists each team's agent indices."""

    def __init__(
        self,
        teams: Sequence[Sequence[int]],
        in_dim: int,
        hidden_sizes: Sequence[int],
        out_dim: int,
        rng: np.random.Generator,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.members = tuple(tuple(team) for team in teams)
        self.slots = team_slots(self.members)
        self.teams = [
            MLP(in_dim + len(team), hidden_sizes, out_dim, rng, **kwargs) for team in self.members
        ]
        self.params = [
            Param(f"teams.{k}.{p.name}", p.variable, p.transposed)
            for k, net in enumerate(self.teams)
            for p in net.params
        ]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        outputs = []
        for team, net in zip(self.members, self.teams, strict=True):
            rows = tf.stack([x[:, i] for i in team], axis=1)
            size = len(team)
            shape = tf.stack([tf.shape(x)[0], size, size])
            ids = tf.broadcast_to(tf.eye(size, dtype=x.dtype), shape)
            outputs.append(net(tf.concat([rows, ids], axis=-1)))
        return tf.stack([outputs[k][:, j] for k, j in self.slots], axis=1)


def variables(net: Any) -> list[tf.Variable]:
    """The variables of ``net``'s ``params``, in canonical order."""
    return [p.variable for p in net.params]


def module_state(prefix: str, net: Any) -> dict[str, NDArray[Any]]:
    """``net``'s parameters as NumPy arrays named ``<prefix>.<name>`` in PyTorch's layout."""
    return {f"{prefix}.{p.name}": p.to_canonical(p.variable.numpy()) for p in net.params}


def load_module(prefix: str, net: Any, tensors: Mapping[str, NDArray[Any]]) -> None:
    """Load ``module_state``'s arrays (from any backend) back; every name must be there and every
    shape must match, or nothing is assigned."""
    values = []
    for p in net.params:
        key = f"{prefix}.{p.name}"
        if key not in tensors:
            raise KeyError(f"the state has no tensor {key!r}")
        value = p.from_canonical(tensors[key])
        if tuple(value.shape) != tuple(p.variable.shape):
            raise ValueError(f"{key} has shape {value.shape}, expected {tuple(p.variable.shape)}")
        values.append(value)
    for p, value in zip(net.params, values, strict=True):
        p.variable.assign(np.asarray(value, np.float32))


def copy_into(target: Any, source: Any) -> None:
    """Assign ``source``'s parameters to ``target``'s (same architecture)."""
    for t, s in zip(target.params, source.params, strict=True):
        t.variable.assign(s.variable)


def soft_update(target: Any, live: Any, tau: float) -> None:
    """target <- target + tau * (live - target), as torch's ``lerp_`` computes it for tau < 0.5."""
    for t, s in zip(target.params, live.params, strict=True):
        if tau < 0.5:
            t.variable.assign(t.variable + tau * (s.variable - t.variable))
        else:
            t.variable.assign(s.variable - (s.variable - t.variable) * (1.0 - tau))


class TensorFlowState(SelfSerialisingOptimizers):
    """``NetworkState`` for learners of this backend's networks trained by its ``TorchAdam``."""

    def _module_state(self, name: str) -> dict[str, NDArray[Any]]:
        return module_state(name, self._network(name))

    def _load_module(self, name: str, tensors: Mapping[str, NDArray[Any]]) -> None:
        load_module(name, self._network(name), tensors)
