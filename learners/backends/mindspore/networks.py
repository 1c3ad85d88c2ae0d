"""MindSpore networks whose parameters carry the checkpoint's canonical names, and state helpers.

MindSpore's ``Dense`` keeps its weight as ``(out, in)``, PyTorch's layout, so parameters cross the
checkpoint boundary unchanged: a network's canonical names are the attribute paths that
``Cell.parameters_and_names`` reports (``layers.0.weight``, ``head.bias``, ``log_std``), whatever
prefix MindSpore later gives the ``Parameter`` objects themselves to keep names unique in a graph.

``MLP`` mirrors ``learners.backends.torch.networks.MLP`` name for name: its linear layers sit at
the even indices of ``layers`` (ReLUs at the odd ones), so ``actor.layers.2.weight`` is the second
layer in every backend. Initial weights come from a NumPy generator, drawn exactly as the
TensorFlow backend draws them (kernels ``(in, out)``, then transposed), so one seed gives the same
initial weights in both; the checkpoint, not the initialiser, is what the parity tests rely on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from numpy.typing import NDArray

from learners.algorithms.learner_state import SelfSerialisingOptimizers
from learners.backends.mindspore.ops import tanh64
from learners.backends.mindspore.runtime import configure
from learners.envs.teams import team_slots

configure()


def fan_in_uniform(
    rng: np.random.Generator, in_dim: int, out_dim: int, bound: float | None = None
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """PyTorch's default Linear init, U(-1/sqrt(in), 1/sqrt(in)), or U(-bound, bound): a weight
    ``(out, in)`` and a bias ``(out,)``."""
    limit = 1.0 / math.sqrt(in_dim) if bound is None else bound
    kernel = rng.uniform(-limit, limit, (in_dim, out_dim)).astype(np.float32)
    bias = rng.uniform(-limit, limit, (out_dim,)).astype(np.float32)
    return np.ascontiguousarray(kernel.T), bias


def orthogonal(
    rng: np.random.Generator, in_dim: int, out_dim: int, gain: float
) -> NDArray[np.float32]:
    """An ``(out, in)`` weight with orthonormal rows or columns (Saxe et al., 2014), times
    ``gain``."""
    flat = rng.standard_normal((max(in_dim, out_dim), min(in_dim, out_dim)))
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))  # a uniform draw over the orthogonal group, not QR's biased one
    kernel = q if in_dim >= out_dim else q.T
    return np.ascontiguousarray((gain * kernel).T.astype(np.float32))


def parameter(value: NDArray[Any], name: str, *, trainable: bool = True) -> Parameter:
    """A float32 ``Parameter`` holding ``value``."""
    return Parameter(Tensor(np.asarray(value, np.float32)), name=name, requires_grad=trainable)


class Linear(nn.Cell):
    """``y = x W^T + b`` over inputs ``(..., in)``; ``weight`` is ``(out, in)`` as in torch."""

    def __init__(self, weight: NDArray[Any], bias: NDArray[Any], *, trainable: bool = True) -> None:
        super().__init__()
        self.weight = parameter(weight, "weight", trainable=trainable)
        self.bias = parameter(bias, "bias", trainable=trainable)

    def construct(self, x: Tensor) -> Tensor:
        return ops.dense(x, self.weight, self.bias)


class MLP(nn.Cell):
    """Linear layers with ReLU between them; ``tanh_output`` squashes the output into [-1, 1].

    ``output_scale`` draws the last layer from U(-scale, scale) (DDPG's actor starts near zero
    actions and its critic near zero values)."""

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
        cells: list[nn.Cell] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            last = i == len(sizes) - 2
            weight, bias = fan_in_uniform(rng, a, b, output_scale if last else None)
            cells.append(Linear(weight, bias, trainable=trainable))
            if not last:
                cells.append(nn.ReLU())
        self.layers = nn.SequentialCell(cells)

    def construct(self, x: Tensor) -> Tensor:
        y = self.layers(x)
        if self.tanh_output:
            y = tanh64(y)
        return y


class PerAgentMLP(nn.Cell):
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
        self.agents = nn.CellList(
            [MLP(in_dim, hidden_sizes, out_dim, rng, **kwargs) for _ in range(num_agents)]
        )

    def construct(self, x: Tensor) -> Tensor:
        return ops.stack([self.agents[i](x[:, i]) for i in range(len(self.agents))], 1)


class PerTeamMLP(nn.Cell):
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
        self.teams = nn.CellList(
            [MLP(in_dim + len(team), hidden_sizes, out_dim, rng, **kwargs) for team in self.members]
        )
        self.ids = [Tensor(np.eye(len(team), dtype=np.float32)) for team in self.members]

    def construct(self, x: Tensor) -> Tensor:
        outputs = []
        for k in range(len(self.members)):
            team = self.members[k]
            rows = ops.stack([x[:, i] for i in team], 1)
            ids = ops.broadcast_to(self.ids[k], (x.shape[0], len(team), len(team)))
            outputs.append(self.teams[k](ops.cat((rows, ids), -1)))
        return ops.stack([outputs[k][:, j] for k, j in self.slots], 1)


def named_parameters(net: nn.Cell) -> list[tuple[str, Parameter]]:
    """``net``'s parameters under their canonical names (attribute paths), in definition order."""
    return list(net.parameters_and_names())


def parameters(net: nn.Cell) -> list[Parameter]:
    """``net``'s parameters in canonical order."""
    return [p for _, p in named_parameters(net)]


def module_state(prefix: str, net: nn.Cell) -> dict[str, NDArray[Any]]:
    """``net``'s parameters as NumPy arrays named ``<prefix>.<name>`` (PyTorch's layout)."""
    return {f"{prefix}.{name}": p.asnumpy().copy() for name, p in named_parameters(net)}


def load_module(prefix: str, net: nn.Cell, tensors: Mapping[str, NDArray[Any]]) -> None:
    """Load ``module_state``'s arrays (from any backend) back; every name must be there and every
    shape must match, or nothing is assigned.

    Values are copied into the parameters' memory (``copy_``), never swapped in with
    ``Parameter.set_data``: MindSpore 2.10's compiled graphs keep reading (and writing) the memory
    a parameter had when they were compiled, so after ``set_data`` they would go on using the old
    weights."""
    values = []
    for name, param in named_parameters(net):
        key = f"{prefix}.{name}"
        if key not in tensors:
            raise KeyError(f"the state has no tensor {key!r}")
        value = np.asarray(tensors[key], np.float32)
        if tuple(value.shape) != tuple(param.shape):
            raise ValueError(f"{key} has shape {value.shape}, expected {tuple(param.shape)}")
        values.append(value)
    for param, value in zip(parameters(net), values, strict=True):
        param.copy_(Tensor(value))


def copy_into(target: nn.Cell, source: nn.Cell) -> None:
    """Give ``target`` ``source``'s parameter values (same architecture)."""
    for t, s in zip(parameters(target), parameters(source), strict=True):
        t.copy_(Tensor(s.asnumpy().copy()))


def soft_update(targets: Sequence[Parameter], lives: Sequence[Parameter], tau: float) -> None:
    """target <- target + tau * (live - target), as torch's ``lerp_`` computes it (its formula
    switches at tau = 0.5); runs inside a compiled update (graph-mode ``zip`` takes no
    ``strict``)."""
    for target, live in zip(targets, lives):  # noqa: B905
        if tau < 0.5:
            ops.assign(target, target + tau * (live - target))
        else:
            ops.assign(target, live - (live - target) * (1.0 - tau))


def float_tensor(value: NDArray[Any] | float) -> Tensor:
    """A float32 tensor of ``value`` (scalars become 0-d tensors)."""
    return Tensor(np.asarray(value, np.float32), ms.float32)


class MindSporeState(SelfSerialisingOptimizers):
    """``NetworkState`` for learners of this backend's networks trained by its ``TorchAdam``."""

    def _module_state(self, name: str) -> dict[str, NDArray[Any]]:
        return module_state(name, self._network(name))

    def _load_module(self, name: str, tensors: Mapping[str, NDArray[Any]]) -> None:
        load_module(name, self._network(name), tensors)
