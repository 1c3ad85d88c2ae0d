"""Adam exactly as ``torch.optim.Adam`` computes it, as a MindSpore cell a compiled update calls.

MindSpore's ``nn.Adam`` and PyTorch's differ where epsilon goes. PyTorch (Kingma & Ba's
Algorithm 1):

    m_t = b1 m + (1 - b1) g;  v_t = b2 v + (1 - b2) g^2
    p  -= lr / (1 - b1^t) * m_t / (sqrt(v_t) / sqrt(1 - b2^t) + eps)

MindSpore folds both bias corrections into the step size, ``lr * sqrt(1 - b2^t) / (1 - b1^t) *
m_t / (sqrt(v_t) + eps)``: its epsilon is the paper's "epsilon hat", ``eps * sqrt(1 - b2^t)`` in
PyTorch's terms, a different update while t is small (PPO's eps = 1e-5 is large enough for it to
show). This cell writes the torch update out instead. The bias corrections and the step size are
computed on the host in float64, as torch computes them in Python floats, and enter the graph as
float32 (where torch's kernels use them). The moments are saved under torch's names and layout
(``optim/<net>/<param>/exp_avg``...), so an optimiser's state is portable across backends too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from numpy.typing import NDArray

from learners.backends.mindspore.networks import float_tensor, parameter
from learners.backends.mindspore.ops import MindSporeOps
from learners.backends.mindspore.runtime import configure
from learners.functional.gradients import clip_coefficient

configure()

_OPS = MindSporeOps()


def flatten(tensors: Sequence[Tensor]) -> Tensor:
    """Tensors (gradients or parameters, one per parameter in order) as one vector: the layout
    ``TorchAdam`` steps."""
    return ops.cat([ops.reshape(t, (-1,)) for t in tensors])


def clip_flat(grad: Tensor, max_grad_norm: float | None) -> tuple[Tensor, Tensor]:
    """``learners.functional.gradients.clip_by_global_norm`` over ``flatten``'s one vector: the
    global norm is the vector's norm, and every gradient is scaled by the one coefficient. In a
    compiled graph that is a handful of operations in all where the per-tensor form takes four
    per parameter, and MindSpore's compiler takes time per operation (docs/backends.md). Returns
    the gradient and its norm before clipping."""
    norm = ops.sqrt(ops.sum(grad * grad))
    if max_grad_norm is None:
        return grad, norm
    return grad * ops.stop_gradient(clip_coefficient(_OPS, norm, max_grad_norm)), norm


class TorchAdam(nn.Cell):
    """Adam over ``params`` with PyTorch's arithmetic (no weight decay, no AMSGrad).

    ``names`` are the parameters' canonical names (the checkpoint's names for their moments). The
    host calls ``next_hyper()`` before each step and passes its result to the cell, so the step
    count and the learning rate never force a graph to recompile.
    """

    def __init__(
        self,
        params: Sequence[Parameter],
        names: Sequence[str],
        learning_rate: float,
        *,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        super().__init__()
        self.names = list(names)
        self.params = ParameterTuple(list(params))
        self.beta1, self.beta2 = betas
        # The moments' weights, computed here in float64 as torch computes them in Python floats.
        # Written as ``1.0 - self.beta2`` inside ``construct``, a compiled graph folds the
        # subtraction in float32: 1 - 0.999f = 0.0009999871, 1.3e-5 off, which moved every
        # compiled first step 7e-6 (relative) away from torch's.
        self.one_minus_beta1 = 1.0 - self.beta1
        self.one_minus_beta2 = 1.0 - self.beta2
        self.eps = eps
        self.learning_rate = learning_rate
        # torch keeps a float step per parameter; they always move together, so one counter.
        self.step = 0
        # The moments of every parameter, flattened and concatenated: the update then runs as a
        # dozen operations over one vector instead of a dozen per parameter (a compiled graph pays
        # per operation: the Adam steps of WQMIX's 32 parameters took 8.5 ms the other way, 5.7 ms
        # this way). The arithmetic per entry is the same.
        self.sizes = tuple(int(np.prod(p.shape)) for p in params)
        self.shapes = tuple(tuple(p.shape) for p in params)
        self.offsets = tuple(int(o) for o in np.cumsum((0, *self.sizes))[:-1])
        self.size = sum(self.sizes)
        self.exp_avg = parameter(np.zeros(self.size, np.float32), "exp_avg", trainable=False)
        self.exp_avg_sq = parameter(np.zeros(self.size, np.float32), "exp_avg_sq", trainable=False)

    def next_hyper(self) -> Tensor:
        """Count a step and return ``[lr / (1 - b1^t), sqrt(1 - b2^t)]`` for it (float32)."""
        self.step += 1
        bias_correction1 = 1.0 - self.beta1**self.step
        bias_correction2 = 1.0 - self.beta2**self.step
        step_size = self.learning_rate / bias_correction1
        return float_tensor(np.array([step_size, math.sqrt(bias_correction2)]))

    def construct(self, grad: Tensor, hyper: Tensor) -> Tensor:
        """One step with ``grad`` (every parameter's gradient, ``flatten``ed; ``size`` entries)
        and ``next_hyper()``'s values."""
        step_size, bias_correction2_sqrt = hyper[0], hyper[1]
        flat = flatten(self.params)
        m, v = self.exp_avg, self.exp_avg_sq
        # torch: exp_avg.lerp_(grad, 1 - beta1)
        #        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        m_next = m + self.one_minus_beta1 * (grad - m)
        v_next = v * self.beta2 + self.one_minus_beta2 * grad * grad
        denom = ops.sqrt(v_next) / bias_correction2_sqrt + self.eps
        # torch: param.addcdiv_(exp_avg, denom, value=-step_size), i.e. p + (-lr' * m) / denom
        flat_next = flat - (step_size * m_next) / denom
        # Every new value first, then the writes: reading a parameter after writing it makes the
        # graph order the two, which costs more than the arithmetic here.
        ops.assign(m, m_next)
        ops.assign(v, v_next)
        # Each parameter's piece as a slice at a constant offset. ``ops.split`` into the same
        # pieces made the cell take 1.6 times as long to compile (2.1-3.1 s against 1.35-1.5 s
        # for an MLP's six parameters; 7.2-7.4 s against 4.05-4.08 s for thirty), for no faster a
        # step (docs/backends.md).
        for param, offset, size, shape in zip(  # noqa: B905
            self.params, self.offsets, self.sizes, self.shapes
        ):
            ops.assign(param, ops.reshape(flat_next[offset : offset + size], shape))
        return hyper

    def _moments(self, flat: Parameter) -> list[NDArray[np.float32]]:
        """A flat moment vector cut back into one array per parameter."""
        cuts = np.cumsum(self.sizes)[:-1]
        values = np.split(flat.asnumpy(), cuts)
        return [v.reshape(shape).copy() for v, shape in zip(values, self.shapes, strict=True)]

    # -- portable state ---------------------------------------------------------------------------

    def state(self, net: str, prefix: str) -> dict[str, NDArray[Any]]:
        """The moments as ``optim/<net>/<prefix>.<param>/{step,exp_avg,exp_avg_sq}`` in torch's
        layout; nothing before the first step (a fresh torch Adam has no state either)."""
        if self.step == 0:
            return {}
        out: dict[str, NDArray[Any]] = {}
        exp_avg, exp_avg_sq = self._moments(self.exp_avg), self._moments(self.exp_avg_sq)
        for name, m, v in zip(self.names, exp_avg, exp_avg_sq, strict=True):
            head = f"optim/{net}/{prefix}.{name}/"
            out[head + "step"] = np.array(float(self.step), np.float32)
            out[head + "exp_avg"] = m
            out[head + "exp_avg_sq"] = v
        return out

    def load_state(self, net: str, prefix: str, tensors: Mapping[str, NDArray[Any]]) -> None:
        """Restore ``state``'s arrays (written by any backend); none present means a fresh Adam."""
        heads = [f"optim/{net}/{prefix}.{name}/" for name in self.names]
        if not any(head + "step" in tensors for head in heads):
            self.step = 0
            for slot in (self.exp_avg, self.exp_avg_sq):
                slot.copy_(Tensor(np.zeros(slot.shape, np.float32)))
            return
        steps = {float(np.asarray(tensors[head + "step"])) for head in heads}
        if len(steps) != 1:
            raise ValueError(f"the {net} optimiser's parameters were stepped {sorted(steps)} times")
        flats = []
        for key in ("exp_avg", "exp_avg_sq"):
            pieces = []
            for head, shape in zip(heads, self.shapes, strict=True):
                value = np.asarray(tensors[head + key], np.float32)
                if value.shape != shape:
                    raise ValueError(f"{head}{key} has shape {value.shape}, expected {shape}")
                pieces.append(value.reshape(-1))
            flats.append(np.concatenate(pieces))
        self.exp_avg.copy_(Tensor(flats[0]))
        self.exp_avg_sq.copy_(Tensor(flats[1]))
        self.step = int(steps.pop())
