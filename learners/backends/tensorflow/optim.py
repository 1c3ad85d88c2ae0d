"""Adam exactly as ``torch.optim.Adam`` computes it, and the gradient step every TF learner takes.

Keras' Adam and PyTorch's differ where epsilon goes. PyTorch (Kingma & Ba's Algorithm 1):

    m_t = b1 m + (1 - b1) g;  v_t = b2 v + (1 - b2) g^2
    p  -= lr / (1 - b1^t) * m_t / (sqrt(v_t) / sqrt(1 - b2^t) + eps)

Keras folds both bias corrections into the step size, ``lr * sqrt(1 - b2^t) / (1 - b1^t) * m_t /
(sqrt(v_t) + eps)``: its epsilon is the "epsilon hat" of the paper's section 2, effectively
``eps * sqrt(1 - b2^t)`` in PyTorch's terms, which is not the same update while t is small (and
PPO's eps = 1e-5 is large enough for that to show). Rather than approximate, this module writes the
torch update out, so the same checkpointed moments give the same next step in either backend, and
the moments are saved under torch's names and layout (``optim/<net>/<param>/exp_avg``...), which
makes an optimiser's state portable too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from numpy.typing import NDArray

from learners.backends.tensorflow.networks import Param
from learners.backends.tensorflow.ops import TensorFlowOps
from learners.functional.gradients import clip_by_global_norm


class TorchAdam:
    """Adam over ``params`` with PyTorch's arithmetic (no weight decay, no AMSGrad).

    ``learning_rate`` is a variable, so a compiled step reads its current value after a decay."""

    def __init__(
        self,
        params: Sequence[Param],
        learning_rate: float,
        *,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params = list(params)
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.learning_rate = tf.Variable(learning_rate, dtype=tf.float64, trainable=False)
        # torch keeps a float step per parameter; they always move together, so one counter.
        self.step = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self.exp_avg = [self._slot(p) for p in self.params]
        self.exp_avg_sq = [self._slot(p) for p in self.params]

    @staticmethod
    def _slot(param: Param) -> tf.Variable:
        return tf.Variable(tf.zeros_like(param.variable), trainable=False)

    def apply(self, grads: Sequence[tf.Tensor]) -> None:
        """One step with ``grads`` (one per parameter, in order)."""
        self.step.assign_add(1.0)
        # Bias corrections and step size in float64, as torch computes them in Python floats.
        bias_correction1 = 1.0 - tf.pow(tf.constant(self.beta1, tf.float64), self.step)
        bias_correction2 = 1.0 - tf.pow(tf.constant(self.beta2, tf.float64), self.step)
        step_size = tf.cast(self.learning_rate / bias_correction1, tf.float32)
        bias_correction2_sqrt = tf.cast(tf.sqrt(bias_correction2), tf.float32)
        for param, m, v, grad in zip(
            self.params, self.exp_avg, self.exp_avg_sq, grads, strict=True
        ):
            # torch: exp_avg.lerp_(grad, 1 - beta1);
            # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
            m.assign(m + (1.0 - self.beta1) * (grad - m))
            v.assign(v * self.beta2 + (1.0 - self.beta2) * (grad * grad))
            denom = tf.sqrt(v) / bias_correction2_sqrt + self.eps
            param.variable.assign_sub(step_size * m / denom)

    # -- portable state ---------------------------------------------------------------------------

    def state(self, net: str, prefix: str) -> dict[str, NDArray[Any]]:
        """The moments as ``optim/<net>/<prefix>.<param>/{step,exp_avg,exp_avg_sq}`` in torch's
        layout; nothing before the first step (a fresh torch Adam has no state either)."""
        step = float(self.step.numpy())
        if step == 0.0:
            return {}
        out: dict[str, NDArray[Any]] = {}
        for param, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
            head = f"optim/{net}/{prefix}.{param.name}/"
            out[head + "step"] = np.array(step, np.float32)
            out[head + "exp_avg"] = param.to_canonical(m.numpy())
            out[head + "exp_avg_sq"] = param.to_canonical(v.numpy())
        return out

    def load_state(self, net: str, prefix: str, tensors: Mapping[str, NDArray[Any]]) -> None:
        """Restore ``state``'s arrays (written by any backend); none present means a fresh Adam."""
        heads = [f"optim/{net}/{prefix}.{p.name}/" for p in self.params]
        if not any(head + "step" in tensors for head in heads):
            self.step.assign(0.0)
            for slot in (*self.exp_avg, *self.exp_avg_sq):
                slot.assign(tf.zeros_like(slot))
            return
        steps = {float(np.asarray(tensors[head + "step"])) for head in heads}
        if len(steps) != 1:
            raise ValueError(f"the {net} optimiser's parameters were stepped {sorted(steps)} times")
        for param, m, v, head in zip(
            self.params, self.exp_avg, self.exp_avg_sq, heads, strict=True
        ):
            m.assign(param.from_canonical(tensors[head + "exp_avg"]).astype(np.float32))
            v.assign(param.from_canonical(tensors[head + "exp_avg_sq"]).astype(np.float32))
        self.step.assign(steps.pop())


def gradient_step(
    ops: TensorFlowOps,
    tape: tf.GradientTape,
    loss: tf.Tensor,
    optimizers: Sequence[TorchAdam],
    max_grad_norm: float | None,
) -> tf.Tensor:
    """Differentiate ``loss`` with respect to every optimiser's parameters, clip all the gradients
    together by their global norm (the shared ``learners.functional.gradients`` definition, never
    per tensor: reference defect ``per-tensor-clipping``) and step each optimiser; returns the
    norm before clipping."""
    variables = [p.variable for opt in optimizers for p in opt.params]
    grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    # A kernel gathered per agent (one per team) has a sparse gradient: made dense here.
    grads = [tf.convert_to_tensor(g) for g in grads]
    clipped, norm = clip_by_global_norm(ops, grads, max_grad_norm)
    start = 0
    for opt in optimizers:
        opt.apply(clipped[start : start + len(opt.params)])
        start += len(opt.params)
    return norm
