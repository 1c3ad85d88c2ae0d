"""Gradient clipping by global norm, one definition for every backend.

Every learner config names this ``max_grad_norm: float | None`` (None = off); the reference called
the same thing ``use_grad_clip``/``grad_clip_norm`` in one learner and ``use_grad_norm``/
``max_grad_norm`` in another (reference defect ``two-clipping-names``, docs/reference-defects.md).
The norm is *global*: one norm over all gradients together, and every gradient is scaled by the
same factor, which keeps the update's direction. The reference's TensorFlow copy clipped each
tensor to the norm on its own, and did so whatever the config said (reference defect
``per-tensor-clipping``); that changes the direction and ignores the switch.
"""

from __future__ import annotations

from collections.abc import Sequence

from learners.functional.ops import A, Ops

# Added to the norm before dividing, as torch.nn.utils.clip_grad_norm_ does, so a zero gradient
# stays zero instead of becoming 0/0.
NORM_EPS = 1e-6


def global_norm(ops: Ops[A], grads: Sequence[A]) -> A:
    """sqrt(sum over every tensor of the sum of its squared entries)."""
    total = ops.sum(grads[0] * grads[0])
    for grad in grads[1:]:
        total = total + ops.sum(grad * grad)
    return ops.sqrt(total)


def clip_coefficient(ops: Ops[A], norm: A, max_grad_norm: float) -> A:
    """The factor every gradient is multiplied by: min(1, max_grad_norm / (norm + eps))."""
    return ops.minimum(max_grad_norm / (norm + NORM_EPS), 1.0)


def clip_by_global_norm(
    ops: Ops[A], grads: Sequence[A], max_grad_norm: float | None
) -> tuple[list[A], A]:
    """Scale ``grads`` so their global norm is at most ``max_grad_norm``; ``None`` leaves them as
    they are. Returns the gradients and their global norm before clipping (always measured, so the
    stats report it whether clipping is on or off)."""
    norm = global_norm(ops, grads)
    if max_grad_norm is None:
        return list(grads), norm
    scale = ops.stop_gradient(clip_coefficient(ops, norm, max_grad_norm))
    return [grad * scale for grad in grads], norm
