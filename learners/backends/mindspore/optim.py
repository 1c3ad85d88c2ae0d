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
from learners.backends.mindspore.runtime import configure

configure()


class TorchAdam(nn.Cell):
    """Adam over ``params`` with PyTorch's arithmetic (no weight decay, no AMSGrad).

    ``names`` are the parameters' canonical names (used for the moments' own parameter names and
    for the checkpoint). The host calls ``next_hyper()`` before each step and passes its result to
    the cell, so the step count and the learning rate never force a graph to recompile.
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
        self.eps = eps
        self.learning_rate = learning_rate
        # torch keeps a float step per parameter; they always move together, so one counter.
        self.step = 0
        self.exp_avg = ParameterTuple(
            [self._slot(p, f"{n}.exp_avg") for p, n in zip(params, names, strict=True)]
        )
        self.exp_avg_sq = ParameterTuple(
            [self._slot(p, f"{n}.exp_avg_sq") for p, n in zip(params, names, strict=True)]
        )

    @staticmethod
    def _slot(param: Parameter, name: str) -> Parameter:
        return parameter(np.zeros(param.shape, np.float32), name, trainable=False)

    def next_hyper(self) -> Tensor:
        """Count a step and return ``[lr / (1 - b1^t), sqrt(1 - b2^t)]`` for it (float32)."""
        self.step += 1
        bias_correction1 = 1.0 - self.beta1**self.step
        bias_correction2 = 1.0 - self.beta2**self.step
        step_size = self.learning_rate / bias_correction1
        return float_tensor(np.array([step_size, math.sqrt(bias_correction2)]))

    def construct(self, grads: tuple[Tensor, ...], hyper: Tensor) -> Tensor:
        """One step with ``grads`` (one per parameter, in order) and ``next_hyper()``'s values."""
        step_size, bias_correction2_sqrt = hyper[0], hyper[1]
        for param, m, v, grad in zip(self.params, self.exp_avg, self.exp_avg_sq, grads):  # noqa: B905
            # torch: exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
            m_next = m + (1.0 - self.beta1) * (grad - m)
            v_next = v * self.beta2 + (1.0 - self.beta2) * grad * grad
            denom = ops.sqrt(v_next) / bias_correction2_sqrt + self.eps
            param_next = param - step_size * (m_next / denom)
            # Every new value first, then the writes: reading a parameter after writing it makes
            # the graph order the two, which costs more than the arithmetic here.
            ops.assign(m, m_next)
            ops.assign(v, v_next)
            ops.assign(param, param_next)
        return hyper

    # -- portable state ---------------------------------------------------------------------------

    def state(self, net: str, prefix: str) -> dict[str, NDArray[Any]]:
        """The moments as ``optim/<net>/<prefix>.<param>/{step,exp_avg,exp_avg_sq}`` in torch's
        layout; nothing before the first step (a fresh torch Adam has no state either)."""
        if self.step == 0:
            return {}
        out: dict[str, NDArray[Any]] = {}
        for name, m, v in zip(self.names, self.exp_avg, self.exp_avg_sq, strict=True):
            head = f"optim/{net}/{prefix}.{name}/"
            out[head + "step"] = np.array(float(self.step), np.float32)
            out[head + "exp_avg"] = m.asnumpy().copy()
            out[head + "exp_avg_sq"] = v.asnumpy().copy()
        return out

    def load_state(self, net: str, prefix: str, tensors: Mapping[str, NDArray[Any]]) -> None:
        """Restore ``state``'s arrays (written by any backend); none present means a fresh Adam."""
        heads = [f"optim/{net}/{prefix}.{name}/" for name in self.names]
        if not any(head + "step" in tensors for head in heads):
            self.step = 0
            for slot in (*self.exp_avg, *self.exp_avg_sq):
                slot.copy_(Tensor(np.zeros(slot.shape, np.float32)))
            return
        steps = {float(np.asarray(tensors[head + "step"])) for head in heads}
        if len(steps) != 1:
            raise ValueError(f"the {net} optimiser's parameters were stepped {sorted(steps)} times")
        moments = []
        for head, m in zip(heads, self.exp_avg, strict=True):
            for key in ("exp_avg", "exp_avg_sq"):
                value = np.asarray(tensors[head + key], np.float32)
                if value.shape != tuple(m.shape):
                    raise ValueError(f"{head}{key} has shape {value.shape}, expected {m.shape}")
                moments.append(value)
        for slot, value in zip(_interleave(self.exp_avg, self.exp_avg_sq), moments, strict=True):
            slot.copy_(Tensor(value))
        self.step = int(steps.pop())


def _interleave(first: Sequence[Parameter], second: Sequence[Parameter]) -> list[Parameter]:
    return [p for pair in zip(first, second, strict=True) for p in pair]
