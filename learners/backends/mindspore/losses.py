"""Graph-safe forms of the two shared losses that return a NamedTuple.

Inside ``mindspore.jit``, MindSpore builds a ``NamedTuple`` through its Python fallback, and
gradients do not flow through that fallback: differentiating
``learners.functional.losses.policy_loss(...).loss`` in a compiled graph silently yields *zero*
gradients (``tests/learners/backends/test_mindspore_losses.py`` demonstrates it). The functions here
are the shared ones returning plain tuples: ``policy_terms`` is ``policy_loss``'s body line for
line, ``wqmix_terms`` is ``wqmix_loss``'s, and both compose the shared pieces (``masked_mean``) over
the same ``Ops``. The tests hold each to its shared twin, values and gradients, and the parity suite
holds the learners built on them to the PyTorch ones. Every other shared function returns plain
tensors and is called as it is.
"""

from __future__ import annotations

from learners.functional.losses import masked_mean
from learners.functional.ops import A, Ops


def policy_terms(
    ops: Ops[A], log_prob: A, log_prob_old: A, advantages: A, mask: A, clip_eps: float
) -> tuple[A, A, A]:
    """``learners.functional.losses.policy_loss`` as ``(loss, approx_kl, clip_fraction)``: PPO's
    clipped surrogate with exactly the configured ``clip_eps`` (never halved: reference defect
    ``mindspore-ppo-loss``)."""
    advantages = ops.stop_gradient(advantages)
    log_ratio = log_prob - ops.stop_gradient(log_prob_old)
    ratio = ops.exp(log_ratio)
    surrogate = ratio * advantages
    surrogate_clipped = ops.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -masked_mean(ops, ops.minimum(surrogate, surrogate_clipped), mask)
    fixed_ratio = ops.stop_gradient(ratio)
    fixed_log_ratio = ops.stop_gradient(log_ratio)
    approx_kl = masked_mean(ops, (fixed_ratio - 1.0) - fixed_log_ratio, mask)
    outside = ops.as_float(ops.abs(fixed_ratio - 1.0) > clip_eps)
    return loss, approx_kl, masked_mean(ops, outside, mask)


def wqmix_terms(
    ops: Ops[A], q_tot: A, q_central: A, target: A, weights: A, mask: A
) -> tuple[A, A, A, A]:
    """``learners.functional.wqmix.wqmix_loss`` as ``(loss, loss_qmix, loss_central,
    weight_mean)``: both terms are masked means over transitions (reference defect
    ``wqmix-weighting-and-central-loss``)."""
    target = ops.stop_gradient(target)
    td_error = q_tot - target
    central_error = q_central - target
    loss_qmix = masked_mean(ops, ops.stop_gradient(weights) * td_error * td_error, mask)
    loss_central = masked_mean(ops, central_error * central_error, mask)
    return loss_qmix + loss_central, loss_qmix, loss_central, masked_mean(ops, weights, mask)
