"""PyTorch networks and the state helpers every torch learner shares.

Parameter names are the checkpoint's canonical names: an ``MLP`` keeps its layers in
``self.layers`` (``layers.0.weight`` is the first ``Linear``'s (out, in) weight, ReLUs sit at the
odd indices), so ``actor.layers.0.weight`` means the same tensor in every backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from learners.algorithms.learner_state import NetworkState
from learners.backends.torch.ops import TorchOps
from learners.envs.teams import team_slots
from learners.functional.gradients import clip_coefficient


class MLP(nn.Module):
    """Linear layers with ReLU between them; ``tanh_output`` squashes the output into [-1, 1].

    ``output_scale`` shrinks the last layer's initial weights (DDPG's actor starts near zero
    actions and its critic near zero values, which keeps the first updates small)."""

    def __init__(
        self,
        in_dim: int,
        hidden_sizes: Sequence[int],
        out_dim: int,
        *,
        tanh_output: bool = False,
        output_scale: float | None = None,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for hidden in hidden_sizes:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        last = nn.Linear(width, out_dim)
        if output_scale is not None:
            nn.init.uniform_(last.weight, -output_scale, output_scale)
            nn.init.uniform_(last.bias, -output_scale, output_scale)
        layers.append(last)
        if tanh_output:
            layers.append(nn.Tanh())
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class PerAgentMLP(nn.Module):
    """One ``MLP`` per agent (``agents.<i>.layers...``): (B, N, in) -> (B, N, out), agent ``i``'s
    rows through network ``i``. For learners whose agents do not share parameters."""

    def __init__(
        self, num_agents: int, in_dim: int, hidden_sizes: Sequence[int], out_dim: int, **kwargs: Any
    ) -> None:
        super().__init__()
        self.agents = nn.ModuleList(
            MLP(in_dim, hidden_sizes, out_dim, **kwargs) for _ in range(num_agents)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([net(x[:, i]) for i, net in enumerate(self.agents)], dim=1)


class PerTeamMLP(nn.Module):
    """One ``MLP`` per team (``teams.<k>.layers...``, k in ``EnvInfo.team_names`` order), shared by
    the team's agents, who are told apart by a one-hot id within their team appended to their
    input: (B, N, in) -> (B, N, out). For learners that share parameters within a team only.
    ``teams`` lists each team's agent indices."""

    def __init__(
        self,
        teams: Sequence[Sequence[int]],
        in_dim: int,
        hidden_sizes: Sequence[int],
        out_dim: int,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.members = tuple(tuple(team) for team in teams)
        self.slots = team_slots(self.members)
        self.teams = nn.ModuleList(
            MLP(in_dim + len(team), hidden_sizes, out_dim, **kwargs) for team in self.members
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = []
        for team, net in zip(self.members, self.teams, strict=True):
            rows = torch.stack([x[:, i] for i in team], dim=1)
            ids = torch.eye(len(team), dtype=x.dtype, device=x.device).expand(x.shape[0], -1, -1)
            outputs.append(net(torch.cat([rows, ids], dim=-1)))
        return torch.stack([outputs[k][:, j] for k, j in self.slots], dim=1)


def soft_update(target: nn.Module, live: nn.Module, tau: float) -> None:
    """target <- target + tau * (live - target), i.e. tau * live + (1 - tau) * target."""
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(live.parameters()), tau)


def adam(params: Iterable[nn.Parameter], lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam as every torch learner builds it: ``fused``, one kernel per step over all of the
    optimiser's tensors instead of a dozen framework operations each (with ``clip_gradients``,
    about half of an OW-QMIX update's clip-and-step CPU time on the development machine:
    ``docs/learners.md``). The same arithmetic as the per-tensor loop in another order of rounding
    (differences of a few 1e-7 after a thousand steps); the state is the same per-parameter
    ``step``/``exp_avg``/``exp_avg_sq``. ``gradient_step`` hands it contiguous gradients only."""
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)


def clip_gradients(
    ops: TorchOps, grads: Sequence[torch.Tensor], max_grad_norm: float | None
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``learners.functional.gradients.clip_by_global_norm`` in PyTorch's multi-tensor operations:
    the global norm as the norm of the per-tensor norms, every gradient scaled by the shared
    ``clip_coefficient`` in one call. The same numbers as the shared definition up to rounding of
    the norm's sum (the parity suite holds it to the other backends); ``None`` leaves the gradients
    as they are and still measures the norm."""
    grads = list(grads)
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if max_grad_norm is None:
        return grads, norm
    scale = clip_coefficient(ops, norm, max_grad_norm).detach()
    return torch._foreach_mul(grads, scale), norm


def gradient_step(
    ops: TorchOps,
    loss: torch.Tensor,
    optimizers: Sequence[torch.optim.Optimizer],
    params: Sequence[nn.Parameter],
    max_grad_norm: float | None,
) -> float:
    """Backpropagate ``loss`` into ``params`` only, clip by global norm (``clip_gradients``) and
    step every optimiser of ``params``; returns the norm before clipping."""
    grads = torch.autograd.grad(loss, params)
    clipped, norm = clip_gradients(ops, grads, max_grad_norm)
    for param, grad in zip(params, clipped, strict=True):
        # Contiguous: torch 2.13's fused CPU Adam reads a gradient's memory in the parameter's
        # layout, so a transposed gradient (autograd makes some) updates the wrong entries
        # (tests/learners/backends/test_torch_gradient_step.py shows it).
        param.grad = grad.contiguous()
    for optimizer in optimizers:
        optimizer.step()
    return ops.item(norm)


def module_state(prefix: str, module: nn.Module) -> dict[str, NDArray[Any]]:
    """``module``'s parameters and buffers as NumPy arrays named ``<prefix>.<name>``."""
    return {
        f"{prefix}.{k}": v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()
    }


def load_module(prefix: str, module: nn.Module, tensors: Mapping[str, NDArray[Any]]) -> None:
    """Load ``module_state``'s arrays back (every name must be there, shapes must match)."""
    state = {k: torch.as_tensor(np.asarray(tensors[f"{prefix}.{k}"])) for k in module.state_dict()}
    module.load_state_dict(state)


def _param_names(prefix: str, module: nn.Module) -> list[str]:
    return [f"{prefix}.{name}" for name, _ in module.named_parameters()]


def optimizer_state(
    net: str, optimizer: torch.optim.Optimizer, prefix: str, module: nn.Module
) -> dict[str, NDArray[Any]]:
    """Adam's per-parameter state as ``optim/<net>/<param name>/<key>`` (``step``, ``exp_avg``,
    ``exp_avg_sq``), keyed by parameter name rather than torch's positional ids."""
    out: dict[str, NDArray[Any]] = {}
    for name, param in zip(_param_names(prefix, module), module.parameters(), strict=True):
        for key, value in optimizer.state.get(param, {}).items():
            array = value.detach().cpu().numpy() if torch.is_tensor(value) else np.asarray(value)
            out[f"optim/{net}/{name}/{key}"] = array.copy()
    return out


def load_optimizer(
    net: str,
    optimizer: torch.optim.Optimizer,
    prefix: str,
    module: nn.Module,
    tensors: Mapping[str, NDArray[Any]],
) -> None:
    """Load ``optimizer_state``'s arrays back into ``optimizer`` (a fresh one stays fresh). The
    moments are copies: Adam updates them in place, and ``tensors`` stays as the caller gave it."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for index, name in enumerate(_param_names(prefix, module)):
        head = f"optim/{net}/{name}/"
        entries = {k[len(head) :]: v for k, v in tensors.items() if k.startswith(head)}
        if entries:
            state[index] = {k: torch.tensor(np.asarray(v)) for k, v in entries.items()}
    saved = optimizer.state_dict()
    optimizer.load_state_dict({"state": state, "param_groups": saved["param_groups"]})


@contextlib.contextmanager
def seeded_init(seed: int) -> Iterator[None]:
    """Within it, module construction draws from ``seed`` without touching (or depending on) torch's
    global generator: the same seed builds the same weights whatever ran before."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class TorchState(NetworkState):
    """``NetworkState`` for learners of ``nn.Module``s trained by ``torch.optim.Adam``."""

    def _module_state(self, name: str) -> dict[str, NDArray[Any]]:
        return module_state(name, self._network(name))

    def _optimizer_state(self, name: str) -> dict[str, NDArray[Any]]:
        return optimizer_state(name, self._optimizer(name), name, self._network(name))

    def _load_module(self, name: str, tensors: Mapping[str, NDArray[Any]]) -> None:
        load_module(name, self._network(name), tensors)

    def _load_optimizer(self, name: str, tensors: Mapping[str, NDArray[Any]]) -> None:
        load_optimizer(name, self._optimizer(name), name, self._network(name), tensors)
