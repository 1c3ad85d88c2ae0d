"""The PPO family's losses as pure functions over ``Ops`` (Schulman et al., 2017; Yu et al., 2022).

Every loss is a *masked mean*: the sum of the per-entry loss times the mask, divided by the mask's
sum. The mask is the product of the agent mask (an agent that is dead or absent contributes nothing)
and, for recurrent updates, the ``filled`` mask of padded episode chunks. Entries under a zero mask
are removed with ``where``, so a NaN or infinity computed for a padded entry cannot leak into the
sum. The prediction is never multiplied by the mask before the loss (the reference did that,
reference defect ``mindspore-ppo-loss`` in docs/reference-defects.md, which trains masked
predictions towards their target's negation): the mask applies to the loss.
"""

from __future__ import annotations

from typing import Generic, NamedTuple

from learners.functional.ops import A, Ops


def masked_mean(ops: Ops[A], x: A, mask: A) -> A:
    """sum(x * mask) / sum(mask) over every axis; 0 when the mask is all zeros.

    ``mask`` must have ``x``'s shape (or broadcast to it and carry the same count).
    """
    kept = ops.where(mask > 0.5, x, 0.0)
    return ops.sum(kept * mask) / ops.maximum(ops.sum(mask), 1.0)


def huber(ops: Ops[A], error: A, delta: float) -> A:
    """Huber's loss of ``error`` with threshold ``delta``: 0.5 e^2 for |e| <= delta, else
    delta * (|e| - 0.5 delta). Quadratic near zero, linear (gradient delta) in the tails."""
    abs_error = ops.abs(error)
    quadratic = ops.minimum(abs_error, delta)
    linear = abs_error - quadratic
    return 0.5 * quadratic * quadratic + delta * linear


def regression_loss(ops: Ops[A], error: A, huber_delta: float | None) -> A:
    """Per-entry regression loss: Huber(``huber_delta``) or, when it is None, the squared error."""
    if huber_delta is None:
        return error * error
    return huber(ops, error, huber_delta)


class PolicyLoss(NamedTuple, Generic[A]):
    """The clipped surrogate objective and its diagnostics (all scalars)."""

    loss: A
    """-E[min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)], masked mean."""
    approx_kl: A
    """E[(ratio - 1) - log ratio], a non-negative estimate of KL(old || new); no gradient."""
    clip_fraction: A
    """Fraction of entries whose ratio lies outside [1 - eps, 1 + eps]; no gradient."""


def policy_loss(
    ops: Ops[A], log_prob: A, log_prob_old: A, advantages: A, mask: A, clip_eps: float
) -> PolicyLoss[A]:
    """PPO's clipped surrogate with exactly the configured ``clip_eps`` (never rescaled: the
    reference's MindSpore copy halved it, reference defect ``mindspore-ppo-loss``). Advantages
    carry no gradient."""
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
    return PolicyLoss(loss, approx_kl, masked_mean(ops, outside, mask))


def value_loss(
    ops: Ops[A],
    values: A,
    values_old: A,
    returns: A,
    mask: A,
    value_clip_eps: float | None,
    huber_delta: float | None,
) -> A:
    """The critic's loss: regress ``values`` onto ``returns`` (the GAE returns, never the old
    values: the reference's TensorFlow copy did that, reference defect
    ``critic-on-old-values``).

    With ``value_clip_eps`` set, the PPO-style clipped form is used: the larger of the losses of
    the prediction and of ``values_old + clip(values - values_old, -eps, eps)``, so the critic
    gains nothing by moving further than eps from its previous prediction. With value
    normalisation on, ``returns`` is the normalised target and ``values``/``values_old`` are the
    critic's raw (normalised) outputs.
    """
    returns = ops.stop_gradient(returns)
    loss = regression_loss(ops, values - returns, huber_delta)
    if value_clip_eps is not None:
        values_old = ops.stop_gradient(values_old)
        values_clipped = values_old + ops.clip(values - values_old, -value_clip_eps, value_clip_eps)
        loss_clipped = regression_loss(ops, values_clipped - returns, huber_delta)
        loss = ops.maximum(loss, loss_clipped)
    return masked_mean(ops, loss, mask)


def entropy_bonus(ops: Ops[A], entropy: A, mask: A) -> A:
    """The policy's mean entropy over unmasked entries (subtracted, times its coefficient)."""
    return masked_mean(ops, entropy, mask)


class PPOLoss(NamedTuple, Generic[A]):
    """Every term of one PPO minibatch loss (scalars); ``loss`` is what is differentiated."""

    loss: A
    loss_policy: A
    loss_value: A
    entropy: A
    approx_kl: A
    clip_fraction: A


def ppo_loss(
    policy: PolicyLoss[A],
    loss_value: A,
    entropy: A,
    value_coef: float,
    entropy_coef: float,
) -> PPOLoss[A]:
    """loss = loss_policy + value_coef * loss_value - entropy_coef * entropy."""
    loss = policy.loss + value_coef * loss_value - entropy_coef * entropy
    return PPOLoss(
        loss=loss,
        loss_policy=policy.loss,
        loss_value=loss_value,
        entropy=entropy,
        approx_kl=policy.approx_kl,
        clip_fraction=policy.clip_fraction,
    )
